"""Static HTML leaderboard: index.html plus one page per candidate, self-contained (inline CSS, script and
SVG plots), so it can be opened from disk or copied anywhere and viewed without network.

One board per (device, size, precision): speedups measured on different hardware, problem sizes or dtypes never mix.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import jinja2

from db import Database, EvaluationRow, LeaderRow, SolutionRow, metrics
from evaluator.contracts import Status
from kforge.lineage import Call, DeviceSize, Lineage, lineages
from kforge.speed_of_light import Achieved, Cost, Costs, achieved, costs


# -- formatting ----------------------------------------------------------------------------------


def page_of(sha256: str) -> str:
    """Candidate page, relative to the report root."""
    return f"candidates/{sha256[:16]}.html"


def candidate_name(path: str | None, sha256: str) -> str:
    return Path(path).name if path else sha256[:12]


def fmt_num(value: float | None, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.3g}{suffix}"


def fmt_rate(value: float | None, unit: str) -> str:
    """1.2e12 B/s -> '1.2 TB/s'."""
    if value is None:
        return "-"
    prefixes = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
    scale, prefix = next(((s, p) for s, p in prefixes if value >= s), (1.0, ""))
    return f"{value / scale:.3g} {prefix}{unit}"


def fmt_pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("kforge", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(page=page_of, num=fmt_num, rate=fmt_rate, pct=fmt_pct)
    env.globals.update(candidate_name=candidate_name)
    return env


# -- charts --------------------------------------------------------------------------------------


WIDTH, HEIGHT = 440, 250  # chart size in pixels
LINEAGE_WIDTH, LINEAGE_HEIGHT = 880, 300  # a lineage runs over many turns
LEFT, RIGHT, TOP, BOTTOM = 48, 14, 12, 40  # room for tick labels around the plot area


class _Frame:
    """Maps data ranges onto the plot area of a chart of the given size (y grows upwards)."""

    def __init__(self, x_lo: float, x_hi: float, y_hi: float, y_lo: float = 0.0, width: int = WIDTH,
                 height: int = HEIGHT) -> None:  # fmt: skip
        self.x_lo, self.x_hi, self.y_lo, self.y_hi, self.width, self.height = x_lo, x_hi, y_lo, y_hi, width, height
        self.x0, self.x1, self.y0, self.y1 = LEFT, width - RIGHT, height - BOTTOM, TOP

    def x(self, v: float) -> float:
        return round(self.x0 + (v - self.x_lo) / (self.x_hi - self.x_lo) * (self.x1 - self.x0), 1)

    def y(self, v: float) -> float:
        return round(self.y0 - (v - self.y_lo) / (self.y_hi - self.y_lo) * (self.y0 - self.y1), 1)


@dataclass(frozen=True)
class Dot:
    """A point of a chart: coloured by its verdict, linking to its candidate page, carrying its data as data-*."""

    x: float
    y: float
    status: str
    tip: str
    href: str
    data: dict[str, str]


@dataclass(frozen=True)
class Chart:
    """Pixel geometry of one SVG plot: computed here, only drawn by the template."""

    frame: _Frame
    x_label: str
    y_label: str
    x_ticks: list[tuple[float, str]]
    y_ticks: list[tuple[float, str]]
    path: str = ""  # a step curve
    bars: list[tuple[float, float, float, float, str]] = field(default_factory=list)  # x, y, w, h, tooltip
    marker: float | None = None  # x of the 1x line
    level: float | None = None  # y of the 1x line
    dots: list[Dot] = field(default_factory=list)
    edges: list[tuple[float, float, float, float]] = field(default_factory=list)  # from a dot's parent to it

    @property
    def width(self) -> int:
        return self.frame.width

    @property
    def height(self) -> int:
        return self.frame.height


def _nice_step(span: float, n: int = 5) -> float:
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)


def fast_p_chart(fast: dict[float, float], x_max: float) -> Chart:
    """fast_p as a step curve: `fast` holds the fraction at 0 and at every best speedup (where it drops)."""
    f = _Frame(0.0, x_max, 1.0)
    steps = sorted(fast.items())
    path = f"M {f.x(0)} {f.y(steps[0][1])} " + " ".join(f"H {f.x(p)} V {f.y(v)}" for p, v in steps[1:])
    step = _nice_step(x_max)
    x_ticks = [(f.x(i * step), f"{i * step:g}") for i in range(int(x_max / step) + 1)]
    y_ticks = [(f.y(v), f"{v:.2g}") for v in (0, 0.25, 0.5, 0.75, 1)]
    return Chart(f, "p (speedup over eager)", "fast_p", x_ticks, y_ticks, path=f"{path} H {f.x(x_max)}",
                 marker=f.x(1) if x_max > 1 else None)  # fmt: skip


def _power_label(k: int) -> str:
    return f"{2**k}x" if k >= 0 else f"1/{2**-k}x"


def histogram_chart(speedups: list[float]) -> Chart:
    """Correct timed runs per power-of-two speedup bin, so 0.05x and 20x fit one axis."""
    lo, hi = math.floor(math.log2(min(speedups))), math.ceil(math.log2(max(speedups)))
    hi = max(hi, lo + 1)
    counts = [0] * (hi - lo)
    for s in speedups:
        counts[min(math.floor(math.log2(s)), hi - 1) - lo] += 1
    f = _Frame(lo, hi, max(counts))
    gap = (f.x(1) - f.x(0)) * 0.08
    bars = [(f.x(k) + gap, f.y(n), f.x(k + 1) - f.x(k) - 2 * gap, f.y(0) - f.y(n),
             f"{n} in [{_power_label(k)}, {_power_label(k + 1)})") for k, n in enumerate(counts, lo) if n]
    stride = math.ceil((hi - lo) / 8)  # at most ~9 labels: "1/1024x" is wide
    x_ticks = [(f.x(k), _power_label(k)) for k in range(lo, hi + 1) if k % stride == 0]
    y_step = max(1, math.ceil(max(counts) / 4))
    y_ticks = [(f.y(v), str(v)) for v in range(0, max(counts) + 1, y_step)]
    return Chart(f, "speedup over eager (log scale)", "correct runs", x_ticks, y_ticks, bars=bars,
                 marker=f.x(0) if lo <= 0 <= hi else None)  # fmt: skip


LOG_SPAN = 8  # speedups spanning a wider ratio get a log axis
Axis = tuple[Callable[[float], float], float, float, list[tuple[float, str]]]


def _speedup_axis(speedups: list[float]) -> Axis:
    """(speedup -> axis value, lowest, highest, ticks): log2 when the speedups span more than LOG_SPAN, else linear
    from 0, so 0.01x and 20x fit one axis and 1.1x and 1.3x stay apart; 1x is always on it."""
    lo, hi = min(speedups, default=1.0), max(speedups, default=1.0)
    if hi / lo > LOG_SPAN:
        a, b = min(math.floor(math.log2(lo)), 0), max(math.ceil(math.log2(hi)), 1)
        stride = math.ceil((b - a) / 6)
        return math.log2, a, b, [(k, _power_label(k)) for k in range(a, b + 1) if k % stride == 0]
    step = _nice_step(max(hi, 1.0) * 1.1, 4)
    n = math.ceil(max(hi, 1.0) * 1.1 / step)
    return float, 0.0, n * step, [(i * step, f"{i * step:g}x") for i in range(n + 1)]


def _dot(call: Call, board: DeviceSize, x: float, y: float) -> Dot:
    g, ev = call.gen, call.verdicts[board]
    island = "-" if g.island is None else g.island
    tip = f"call {g.id} · turn {g.turn} · island {island} · {g.prompt_kind} · {ev.status} {fmt_num(ev.speedup, 'x')}"
    return Dot(x, y, ev.status, tip, page_of(g.solution_sha256),
               {"call": str(g.id), "turn": str(g.turn), "status": ev.status, "speedup": f"{ev.speedup or ''}"})


def lineage_chart(lineage: Lineage, board: DeviceSize) -> Chart:
    """Each judged call's speedup over turns, an edge from each parent call (a crossover has two), the best so far
    as a step. Calls
    without a speedup (failed, skipped or untimed) sit on a 'none' line under the axis, coloured by verdict."""
    calls = lineage.judged(board)
    scale, lo, hi, ticks = _speedup_axis([s for c in calls if (s := c.speedup(board))])
    none = lo - (hi - lo) / 10
    first, last = lineage.turns
    f = _Frame(first - 0.5, last + 0.5, hi, y_lo=lo - (hi - lo) / 5, width=LINEAGE_WIDTH, height=LINEAGE_HEIGHT)
    at = {c.gen.id: (f.x(c.x), f.y(scale(s) if (s := c.speedup(board)) else none)) for c in calls}
    best = [(f.x(x), f.y(scale(s))) for x, s in lineage.best_so_far(board)]
    path = " ".join([f"M {best[0][0]} {best[0][1]}", *(f"H {x} V {y}" for x, y in best[1:]), f"H {f.x1}"]) if best else ""
    stride = math.ceil((last - first + 1) / 12)
    return Chart(f, "turn", f"speedup over eager{' (log scale)' if scale is math.log2 else ''}",
                 [(f.x(t), str(t)) for t in range(first, last + 1, stride)],
                 [(f.y(v), label) for v, label in ticks] + [(f.y(none), "none")], path=path, level=f.y(scale(1.0)),
                 dots=[_dot(c, board, *at[c.gen.id]) for c in calls],
                 edges=[(*at[parent], *at[c.gen.id]) for c in calls
                        for parent in c.gen.parent_generation_ids if parent in at])  # fmt: skip


# -- data ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One evaluation and, when correct at full size, how close it came to the device's peaks."""

    row: EvaluationRow
    sol: Achieved | None


@dataclass(frozen=True)
class ModelLine:
    model: str
    candidates: int
    evaluations: int
    correct_rate: float
    attempted: int
    solved: int
    fast_1: float
    best: float | None
    geomean: float | None


@dataclass(frozen=True)
class Board:
    """The leaderboard of one device, problem size and precision."""

    device_name: str
    size: str
    precision: str
    rows: list[tuple[LeaderRow, Achieved | None]]
    fast_p: dict[float, float]
    geomean: float | None
    models: list[ModelLine]
    curve: Chart | None
    histogram: Chart | None


@dataclass(frozen=True)
class Candidate:
    sol: SolutionRow
    runs: list[Run]  # newest first
    ancestors: list[SolutionRow]  # parent first, root last
    children: list[SolutionRow]

    @property
    def name(self) -> str:
        return candidate_name(self.sol.path, self.sol.sha256)

    @property
    def best_speedup(self) -> float | None:
        return max((r.row.speedup for r in self.runs if r.row.status == Status.CORRECT and r.row.speedup), default=None)


def _speed_of_light(cost: Cost | None, ms: float | None, device_name: str) -> Achieved | None:
    """No stored figures or no time: nothing to compare."""
    if cost is None or not ms:
        return None
    return achieved(cost, ms / 1e3, device_name)


def _model_line(model: str, runs: list[EvaluationRow]) -> ModelLine:
    best: dict[str, float] = {}
    for r in runs:
        if r.status == Status.CORRECT and r.speedup:
            best[r.problem] = max(r.speedup, best.get(r.problem, 0.0))
    attempted = len({r.problem for r in runs})
    return ModelLine(
        model=model,
        candidates=len({r.solution_sha256 for r in runs}),
        evaluations=len(runs),
        correct_rate=sum(r.status == Status.CORRECT for r in runs) / len(runs),
        attempted=attempted,
        solved=len({r.problem for r in runs if r.status == Status.CORRECT}),
        fast_1=metrics.fast_p(best.values(), attempted, (1.0,))[1.0],
        best=max(best.values(), default=None),
        geomean=metrics.geomean(best.values()),
    )


def _models(runs: list[EvaluationRow]) -> list[ModelLine]:
    """Per solution model: how often it is correct and how fast its best kernels are."""
    by_model: dict[str, list[EvaluationRow]] = defaultdict(list)
    for r in runs:
        by_model[r.model or "unknown"].append(r)
    return sorted((_model_line(m, rs) for m, rs in by_model.items()), key=lambda m: (-(m.geomean or 0), m.model))


def _board(db: Database, key: tuple[str, str, str], runs: list[EvaluationRow], cost: Costs) -> Board:
    device_name, size, precision = key
    where = dict(device_name=device_name, size=size, precision=precision)
    rows = [r for r in db.leaderboard(**where) if r.n_evaluations]
    best = sorted({r.best_speedup for r in rows if r.best_speedup})
    timed = [r.speedup for r in runs if r.status == Status.CORRECT and r.speedup]
    return Board(
        device_name=device_name,
        size=size,
        precision=precision,
        rows=[(r, _speed_of_light(cost.get((r.problem, size, precision)), r.candidate_ms, device_name)) for r in rows],
        fast_p=db.problem_fast_p(metrics.FAST_P, **where),
        geomean=db.geomean_speedup(**where),
        models=_models(runs),
        curve=fast_p_chart(db.problem_fast_p([0.0, *best], **where), best[-1] * 1.05) if best else None,
        histogram=histogram_chart(timed) if timed else None,
    )


def _boards(db: Database, runs: list[EvaluationRow], cost: Costs) -> list[Board]:
    """One board per device, size and precision; full-size fp32 boards first: they are the ones that matter."""
    groups: dict[tuple[str, str, str], list[EvaluationRow]] = defaultdict(list)
    for r in runs:
        groups[(r.device_name, r.size, r.precision)].append(r)
    keys = sorted(groups, key=lambda k: (k[1] != "full", k[2] != "fp32", k[0], k[2]))
    return [_board(db, key, groups[key], cost) for key in keys]


def _candidates(db: Database, solutions: list[SolutionRow], runs: list[EvaluationRow], cost: Costs) -> list[Candidate]:
    children: dict[str, list[SolutionRow]] = defaultdict(list)
    runs_of: dict[str, list[Run]] = defaultdict(list)
    for s in solutions:
        if s.parent_sha256:
            children[s.parent_sha256].append(s)
    for r in runs:
        sol = _speed_of_light(cost.get((r.problem, r.size, r.precision)), r.candidate_ms, r.device_name) if r.status == Status.CORRECT else None
        runs_of[r.solution_sha256].append(Run(r, sol))
    return [Candidate(s, runs_of[s.sha256], db.solution_lineage(s.sha256)[1:], children[s.sha256]) for s in solutions]


# -- output --------------------------------------------------------------------------------------


def _render(env: jinja2.Environment, template: str, path: Path, **context: object) -> None:
    path.write_text(env.get_template(template).render(**context))


def write_report(db: Database, out_dir: Path) -> Path:
    """Renders the report into out_dir (created; files of an earlier report are overwritten) and
    returns the path of its index.html. It reads the db alone: the speed of light is what the verdicts hold."""
    runs, solutions = db.evaluations(), db.solutions()
    cost = costs(runs)
    candidates = _candidates(db, solutions, runs, cost)
    lines = {lin.problem: lin for lin in lineages(db.generations(), solutions, runs)}
    env, stamp = _environment(), datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    out_dir = Path(out_dir)
    for folder in ("candidates", "lineage"):
        (out_dir / folder).mkdir(parents=True, exist_ok=True)
    for c in candidates:
        _render(env, "candidate.html.j2", out_dir / page_of(c.sol.sha256), c=c, root="../", stamp=stamp,
                lin=lines.get(c.sol.problem))
    for lin in lines.values():
        _render(env, "lineage.html.j2", out_dir / lin.page, lin=lin, root="../", stamp=stamp,
                charts=[(board, lineage_chart(lin, board)) for board in lin.boards])  # fmt: skip
    index = out_dir / "index.html"
    _render(env, "index.html.j2", index, boards=_boards(db, runs, cost), candidates=candidates, lineages=lines,
            n_runs=len(runs), root="", stamp=stamp, db_url=db.url)  # fmt: skip
    return index
