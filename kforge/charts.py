"""The report's SVG charts as pixel geometry: computed here, only drawn by templates/charts.html.j2, so a test can
read where every point, edge and label went."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from kforge.lineage import Call, DeviceSize, Lineage, call_page

WIDTH, HEIGHT = 440, 250  # chart size in pixels
LINEAGE_WIDTH, LINEAGE_HEIGHT = 880, 300  # a lineage runs over many turns
RIGHT, TOP, BOTTOM = 14, 12, 40  # room around the plot area; the left side is sized to the y tick labels
LABEL_BAND = 20  # the rotated y-axis label's column at the left edge, with a gap after it
TICK_GAP, CHAR_W = 6, 6.5  # tick label to axis; the widest character width of the 11 px tick font


def left_margin(labels: list[str]) -> int:
    """Room left of the plot for the y-axis label and the widest y tick label, so they never overlap."""
    return LABEL_BAND + TICK_GAP + math.ceil(CHAR_W * max(map(len, labels), default=1))


class Frame:
    """Maps data ranges onto the plot area of a chart of the given size (y grows upwards)."""

    def __init__(self, x_lo: float, x_hi: float, y_hi: float, y_lo: float = 0.0, width: int = WIDTH,
                 height: int = HEIGHT, left: int = 48) -> None:  # fmt: skip
        self.x_lo, self.x_hi, self.y_lo, self.y_hi, self.width, self.height = x_lo, x_hi, y_lo, y_hi, width, height
        self.x0, self.x1, self.y0, self.y1 = left, width - RIGHT, height - BOTTOM, TOP

    def x(self, v: float) -> float:
        return round(self.x0 + (v - self.x_lo) / (self.x_hi - self.x_lo) * (self.x1 - self.x0), 1)

    def y(self, v: float) -> float:
        return round(self.y0 - (v - self.y_lo) / (self.y_hi - self.y_lo) * (self.y0 - self.y1), 1)


@dataclass(frozen=True)
class Dot:
    """A point of a chart: coloured by its verdict, linking to its page, carrying its data as data-*."""

    x: float
    y: float
    status: str
    tip: str
    href: str
    data: dict[str, str]


@dataclass(frozen=True)
class Chart:
    """Pixel geometry of one SVG plot."""

    frame: Frame
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
    levels = (0, 0.25, 0.5, 0.75, 1)
    f = Frame(0.0, x_max, 1.0, left=left_margin([f"{v:.2g}" for v in levels]))
    steps = sorted(fast.items())
    path = f"M {f.x(0)} {f.y(steps[0][1])} " + " ".join(f"H {f.x(p)} V {f.y(v)}" for p, v in steps[1:])
    step = _nice_step(x_max)
    x_ticks = [(f.x(i * step), f"{i * step:g}") for i in range(int(x_max / step) + 1)]
    y_ticks = [(f.y(v), f"{v:.2g}") for v in levels]
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
    y_step = max(1, math.ceil(max(counts) / 4))
    y_levels = range(0, max(counts) + 1, y_step)
    f = Frame(lo, hi, max(counts), left=left_margin([str(v) for v in y_levels]))
    gap = (f.x(1) - f.x(0)) * 0.08
    bars = [(f.x(k) + gap, f.y(n), f.x(k + 1) - f.x(k) - 2 * gap, f.y(0) - f.y(n),
             f"{n} in [{_power_label(k)}, {_power_label(k + 1)})") for k, n in enumerate(counts, lo) if n]
    stride = math.ceil((hi - lo) / 8)  # at most ~9 labels: "1/1024x" is wide
    x_ticks = [(f.x(k), _power_label(k)) for k in range(lo, hi + 1) if k % stride == 0]
    y_ticks = [(f.y(v), str(v)) for v in y_levels]
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


def _dot(call: Call, board: DeviceSize, x: float, y: float, name: str) -> Dot:
    g, ev = call.gen, call.verdicts[board]
    island = "-" if g.island is None else g.island
    speedup = f" {ev.speedup:.3g}x" if ev.speedup else ""
    tip = f"call {g.id} · {name} · turn {g.turn} · island {island} · {g.prompt_kind} · {ev.status}{speedup}"
    return Dot(x, y, ev.status, tip, call_page(g.id),
               {"call": str(g.id), "turn": str(g.turn), "status": ev.status, "speedup": f"{ev.speedup or ''}"})


def lineage_chart(lineage: Lineage, board: DeviceSize, name: Callable[[str], str] = str) -> Chart:
    """Each judged call's speedup over turns, an edge from each parent call (a crossover has two), the best so far
    as a step. Calls without a speedup (failed, skipped or untimed) sit on a 'none' line under the axis, coloured
    by verdict. `name` gives a candidate's short name for the tooltips."""
    calls = lineage.judged(board)
    scale, lo, hi, ticks = _speedup_axis([s for c in calls if (s := c.speedup(board))])
    ticks = [*ticks, (lo - (hi - lo) / 10, "none")]
    first, last = lineage.turns
    f = Frame(first - 0.5, last + 0.5, hi, y_lo=lo - (hi - lo) / 5, width=LINEAGE_WIDTH, height=LINEAGE_HEIGHT,
              left=left_margin([label for _, label in ticks]))  # fmt: skip
    none = ticks[-1][0]
    at = {c.gen.id: (f.x(c.x), f.y(scale(s) if (s := c.speedup(board)) else none)) for c in calls}
    best = [(f.x(x), f.y(scale(s))) for x, s in lineage.best_so_far(board)]
    path = " ".join([f"M {best[0][0]} {best[0][1]}", *(f"H {x} V {y}" for x, y in best[1:]), f"H {f.x1}"]) if best else ""
    stride = math.ceil((last - first + 1) / 12)
    return Chart(f, "turn", f"speedup over eager{' (log scale)' if scale is math.log2 else ''}",
                 [(f.x(t), str(t)) for t in range(first, last + 1, stride)],
                 [(f.y(v), label) for v, label in ticks], path=path, level=f.y(scale(1.0)),
                 dots=[_dot(c, board, *at[c.gen.id], name(c.gen.solution_sha256 or "")) for c in calls],
                 edges=[(*at[parent], *at[c.gen.id]) for c in calls
                        for parent in c.gen.parent_generation_ids if parent in at])  # fmt: skip
