"""Static HTML leaderboard: index.html, a page per candidate and, per problem with LLM calls, a lineage page and a
page per call; self-contained (inline CSS, script and SVG plots), so it can be opened from disk or copied anywhere
and viewed without network.

One board per (device, size, precision): speedups measured on different hardware, problem sizes or dtypes never mix.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import jinja2

from db import Database, EvaluationRow, GenerationRow, LeaderRow, SolutionRow, metrics
from evaluator.contracts import Status
from kforge.calls import conversation, feedback
from kforge.charts import Chart, fast_p_chart, histogram_chart, lineage_chart
from kforge.lineage import Lineage, call_page, lineages
from kforge.speed_of_light import Achieved, Cost, Costs, achieved, costs

# -- names and formatting ------------------------------------------------------------------------

SHA_FILE = re.compile(r"[0-9a-f]{64}\.py")  # the agent names the files it writes by their SHA


def page_of(sha256: str) -> str:
    """Candidate page, relative to the report root."""
    return f"candidates/{sha256[:16]}.html"


def _origin(sol: SolutionRow, call: GenerationRow | None) -> str:
    if call is not None:
        return f"{call.model} turn {call.turn}"
    if sol.path and not SHA_FILE.fullmatch(Path(sol.path).name):
        return Path(sol.path).name
    return " ".join(filter(None, (sol.origin, sol.model)))


class Names(dict[str, str]):
    """Each solution's short name by its SHA; called with a SHA it names any solution, stored or not."""

    def __call__(self, sha256: str) -> str:
        return self.get(sha256, sha256[:12])


def short_names(solutions: list[SolutionRow], generations: list[GenerationRow]) -> Names:
    """Per solution, 'problem · SHA prefix · origin', the origin being its file's name or the model and turn of the
    first call that wrote it: a generated file is named by its 64-hex SHA, which tells a reader nothing."""
    first: dict[str, GenerationRow] = {}
    for g in sorted(generations, key=lambda g: g.id, reverse=True):
        if g.solution_sha256:
            first[g.solution_sha256] = g
    return Names({s.sha256: f"{s.problem} · {s.sha256[:8]} · {_origin(s, first.get(s.sha256))}" for s in solutions})


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


def _environment(name: Names) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("kforge", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(page=page_of, call_page=call_page, num=fmt_num, rate=fmt_rate, pct=fmt_pct)
    env.globals.update(name=name)
    return env


# -- data ----------------------------------------------------------------------------------------


def latest(runs: list[EvaluationRow]) -> list[EvaluationRow]:
    """Each solution's latest evaluation among `runs` (one board's): the last stored, as Database.latest_verdicts
    reads it, so reruns count once."""
    found: dict[str, EvaluationRow] = {}
    for r in runs:
        if r.solution_sha256 not in found or r.id > found[r.solution_sha256].id:
            found[r.solution_sha256] = r
    return list(found.values())


def judged(runs: list[EvaluationRow]) -> list[EvaluationRow]:
    """The evaluations that judged the code (Status.judged): a skipped one never ran it."""
    return [r for r in runs if Status(r.status).judged]


@dataclass(frozen=True)
class Run:
    """One evaluation and, when correct at full size, how close it came to the device's peaks."""

    row: EvaluationRow
    sol: Achieved | None


@dataclass(frozen=True)
class ModelLine:
    """One model on a board, from the evaluations that judged its code: counts by each solution's latest verdict,
    speedups by the best correct evaluation, as the board's."""

    model: str
    candidates: int
    evaluations: int  # reruns included
    correct_rate: float  # of its candidates, by their latest verdict
    attempted: int
    solved: int
    fast_1: float
    best: float | None
    geomean: float | None


@dataclass(frozen=True)
class ProblemLine:
    """One problem on a board: its best correct kernel, how close that came to the peaks, and its solutions."""

    standing: LeaderRow
    sol: Achieved | None
    latest: dict[str, int]  # status -> how many solutions it is the latest verdict of
    evaluations: int  # every evaluation on the board, reruns included


@dataclass(frozen=True)
class Board:
    """The leaderboard of one device, problem size and precision."""

    device_name: str
    size: str
    precision: str
    rows: list[ProblemLine]
    judged: int  # problems whose code was judged here: fast_p's denominator
    fast_p: dict[float, float]
    geomean: float | None
    models: list[ModelLine]
    curve: Chart | None
    histogram: Chart | None


@dataclass(frozen=True)
class Candidate:
    sol: SolutionRow
    name: str
    runs: list[Run]  # newest first
    ancestors: list[SolutionRow]  # parent first, root last
    children: list[SolutionRow]
    calls: list[GenerationRow]  # the LLM calls that wrote it, first first

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
    newest, attempted = latest(runs), len({r.problem for r in runs})
    return ModelLine(
        model=model,
        candidates=len(newest),
        evaluations=len(runs),
        correct_rate=sum(r.status == Status.CORRECT for r in newest) / len(newest),
        attempted=attempted,
        solved=len({r.problem for r in runs if r.status == Status.CORRECT}),
        fast_1=metrics.fast_p(best.values(), attempted, (1.0,))[1.0],
        best=max(best.values(), default=None),
        geomean=metrics.geomean(best.values()),
    )


def _models(runs: list[EvaluationRow]) -> list[ModelLine]:
    """Per solution model: how often it is correct and how fast its best kernels are; a model whose every answer
    was skipped has nothing judged to show."""
    by_model: dict[str, list[EvaluationRow]] = defaultdict(list)
    for r in judged(runs):
        by_model[r.model or "unknown"].append(r)
    return sorted((_model_line(m, rs) for m, rs in by_model.items()), key=lambda m: (-(m.geomean or 0), m.model))


def problem_fast_p(rows: list[LeaderRow], judged_problems: set[str], thresholds) -> dict[float, float]:
    """Best-of-k fast_p (db.metrics) over the problems whose code was judged on the board, each by its best correct
    speedup: a problem whose every candidate was skipped never ran and is not counted, as a skipped sample is not."""
    best = [r.best_speedup for r in rows if r.problem in judged_problems and r.best_speedup]
    return metrics.fast_p(best, len(judged_problems), thresholds)


def _board(db: Database, key: tuple[str, str, str], runs: list[EvaluationRow], cost: Costs) -> Board:
    device_name, size, precision = key
    standings = [r for r in db.leaderboard(device_name=device_name, size=size, precision=precision) if r.n_evaluations]
    problems = {r.problem for r in judged(runs)}
    best = sorted({r.best_speedup for r in standings if r.best_speedup})
    timed = [r.speedup for r in runs if r.status == Status.CORRECT and r.speedup]
    newest, every = Counter((r.problem, r.status) for r in latest(runs)), Counter(r.problem for r in runs)
    rows = [ProblemLine(r, _speed_of_light(cost.get((r.problem, size, precision)), r.candidate_ms, device_name),
                     {s: n for (p, s), n in sorted(newest.items()) if p == r.problem}, every[r.problem])
            for r in standings]  # fmt: skip
    return Board(
        device_name=device_name,
        size=size,
        precision=precision,
        rows=rows,
        judged=len(problems),
        fast_p=problem_fast_p(standings, problems, metrics.FAST_P),
        geomean=metrics.geomean(r.best_speedup for r in standings if r.best_speedup),
        models=_models(runs),
        curve=fast_p_chart(problem_fast_p(standings, problems, [0.0, *best]), best[-1] * 1.05) if best else None,
        histogram=histogram_chart(timed) if timed else None,
    )


def _boards(db: Database, runs: list[EvaluationRow], cost: Costs) -> list[Board]:
    """One board per device, size and precision; full-size fp32 boards first: they are the ones that matter."""
    groups: dict[tuple[str, str, str], list[EvaluationRow]] = defaultdict(list)
    for r in runs:
        groups[(r.device_name, r.size, r.precision)].append(r)
    keys = sorted(groups, key=lambda k: (k[1] != "full", k[2] != "fp32", k[0], k[2]))
    return [_board(db, key, groups[key], cost) for key in keys]


def _candidates(db: Database, solutions: list[SolutionRow], generations: list[GenerationRow], runs: list[EvaluationRow],
                cost: Costs, name: Names) -> list[Candidate]:  # fmt: skip
    children: dict[str, list[SolutionRow]] = defaultdict(list)
    runs_of: dict[str, list[Run]] = defaultdict(list)
    calls: dict[str | None, list[GenerationRow]] = defaultdict(list)
    for s in solutions:
        if s.parent_sha256:
            children[s.parent_sha256].append(s)
    for r in runs:
        sol = _speed_of_light(cost.get((r.problem, r.size, r.precision)), r.candidate_ms, r.device_name) if r.status == Status.CORRECT else None
        runs_of[r.solution_sha256].append(Run(r, sol))
    for g in sorted(generations, key=lambda g: g.id):
        calls[g.solution_sha256].append(g)
    return [Candidate(s, name(s.sha256), runs_of[s.sha256], db.solution_lineage(s.sha256)[1:], children[s.sha256],
                      calls[s.sha256]) for s in solutions]  # fmt: skip


# -- output --------------------------------------------------------------------------------------


def _render(env: jinja2.Environment, template: str, path: Path, **context: object) -> None:
    path.write_text(env.get_template(template).render(**context))


def _lineage_pages(env: jinja2.Environment, out_dir: Path, lin: Lineage, sources: dict[str, str], name: Names,
                   **context: object) -> None:  # fmt: skip
    """A problem's lineage page, and a page per call: its prompt, its reply and, per board, the verdict on its answer
    with the feedback it earns."""
    charts = [(board, lineage_chart(lin, board, name)) for board in lin.boards]
    _render(env, "lineage.html.j2", out_dir / lin.page, lin=lin, charts=charts, **context)
    children: dict[int, list[int]] = defaultdict(list)
    for c in lin.calls:
        for parent in c.gen.parent_generation_ids:
            children[parent].append(c.gen.id)
    for c in lin.calls:
        verdicts = [(board, ev, feedback(ev, sources.get(ev.solution_sha256, ""))) for board, ev in c.verdicts.items()]
        _render(env, "call.html.j2", out_dir / call_page(c.gen.id), call=c, lin=lin, messages=conversation(c.gen.prompt),
                verdicts=verdicts, children=children[c.gen.id], **context)  # fmt: skip


def write_report(db: Database, out_dir: Path) -> Path:
    """Renders the report into out_dir (created; files of an earlier report are overwritten) and
    returns the path of its index.html. It reads the db alone: the speed of light is what the verdicts hold."""
    runs, solutions, generations = db.evaluations(), db.solutions(), db.generations()
    cost, name = costs(runs), short_names(solutions, generations)
    candidates = _candidates(db, solutions, generations, runs, cost, name)
    lines = {lin.problem: lin for lin in lineages(generations, solutions, runs)}
    env, stamp = _environment(name), datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    out_dir = Path(out_dir)
    for folder in ("candidates", "lineage", "calls"):
        (out_dir / folder).mkdir(parents=True, exist_ok=True)
    for c in candidates:
        _render(env, "candidate.html.j2", out_dir / page_of(c.sol.sha256), c=c, root="../", stamp=stamp,
                lin=lines.get(c.sol.problem))
    sources = {s.sha256: s.source for s in solutions}
    for lin in lines.values():
        _lineage_pages(env, out_dir, lin, sources, name, root="../", stamp=stamp)
    index = out_dir / "index.html"
    _render(env, "index.html.j2", index, boards=_boards(db, runs, cost), candidates=candidates, lineages=lines,
            n_runs=len(runs), root="", stamp=stamp, db_url=db.url)  # fmt: skip
    return index
