"""The figures every board reports, defined once: fast_p, the geometric mean of speedups, a rate's fraction of the
device's peak. Plain numbers in and out, so the db's standings, the CLI's leaderboard and the report compute them the
same way. They live on the db's floor because the standings, the lowest floor that reports them, compute them there.

fast_p comes in two kinds that differ only in what is counted:
- KernelBench's (kforge.kernelbench.fast_p, `kforge leaderboard`): every judged sample, by its own speedup;
- best-of-k (Database.problem_fast_p, the report): every evaluated problem, by its best correct speedup.
The two agree when every problem has one sample."""

from __future__ import annotations

import math
from collections.abc import Iterable

FAST_P = (0.0, 1.0, 1.5, 2.0)  # KernelBench's thresholds


def fast_p(speedups: Iterable[float], n: int, thresholds: Iterable[float] = FAST_P) -> dict[float, float]:
    """Of n counted samples or problems, the fraction that are correct and faster than p times eager PyTorch
    (KernelBench's score.py: count(correct and speedup > p) / n); `speedups` are the correct ones' speedups, so a
    wrong one counts in n and never above p. {} when nothing is counted."""
    if n == 0:
        return {}
    speedups = list(speedups)
    return {float(p): sum(s > p for s in speedups) / n for p in thresholds}


def geomean(values: Iterable[float]) -> float | None:
    """The geometric mean of speedups (ratios: a 2x and a 0.5x average to 1x); None when there are none."""
    values = list(values)
    return math.exp(math.fsum(map(math.log, values)) / len(values)) if values else None


def fraction_of_peak(rate: float | None, peak: float | None) -> float | None:
    """How much of the device's peak a measured rate (bytes or FLOPs per second) reached; None where either is
    unknown (a CPU has no single bandwidth peak)."""
    return rate / peak if rate and peak else None
