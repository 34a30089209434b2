"""The statistics of timed samples: medians with order-statistic intervals, paired ratios of interleaved blocks,
pooled ratios over process pairs. Pure functions, the same for the harness's own stopping rule (in the child)
and the verdict (in the parent)."""

from __future__ import annotations

import math
import random
import statistics

from evaluator.contracts import TimingStats


def median_interval(samples: list[float]) -> tuple[float, float]:
    """The median's 95 % confidence interval by order statistics (no assumption about the distribution)."""
    ordered, n = sorted(samples), len(samples)
    half = 0.98 * math.sqrt(n)  # 1.96 * sqrt(n) / 2 ranks either side of the middle
    return ordered[max(0, math.floor(n / 2 - half))], ordered[min(n - 1, math.ceil(n / 2 + half) - 1)]


def paired_ratio(reference_blocks: list[list[float]], candidate_blocks: list[list[float]]) -> tuple[float, float, float]:
    """(speedup, low, high) from interleaved blocks: block k of each side was timed right beside the other's, so
    what slowed the machine then (another process, a clock change) slowed both, and the ratio of their medians
    cancels it. The median of the per-pair ratios, with its 95 % interval by order statistics."""
    ratios = _block_ratios(reference_blocks, candidate_blocks)
    low, high = median_interval(ratios)
    return statistics.median(ratios), low, high


def _block_ratios(reference_blocks: list[list[float]], candidate_blocks: list[list[float]]) -> list[float]:
    """Each block pair's reference median over its candidate median."""
    return [statistics.median(r) / statistics.median(c) for r, c in zip(reference_blocks, candidate_blocks, strict=True)]


def pooled_ratio(pairs: list[tuple[list[list[float]], list[list[float]]]], draws: int = 2000) -> tuple[float, float, float]:
    """(speedup, low, high) over several process pairs, each its reference and candidate blocks timed beside each
    other: the median of every pair's per-block ratios together, and a 95 % interval that resamples the pairs,
    then the ratios within each (a two-level bootstrap, seeded: the same blocks give the same interval). Order
    statistics over the pooled ratios would take them as independent, but where a pair's processes lie in memory
    moves all of its ratios at once: one pair's +-3 % intervals missed each other's by 15 % (benchmarks/cpu_pairing.py)."""
    ratios = [_block_ratios(reference, candidate) for reference, candidate in pairs]
    rng = random.Random(0)
    medians = sorted(statistics.median([x for pair in rng.choices(ratios, k=len(ratios))
                                        for x in rng.choices(pair, k=len(pair))]) for _ in range(draws))
    return statistics.median([x for pair in ratios for x in pair]), medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]


def tight(middle: float, low: float, high: float, rel_ci: float) -> bool:
    """Whether a median's 95 % interval is within +-rel_ci of it."""
    return middle > 0 and (high - low) / 2 <= rel_ci * middle


def samples_tight(samples: list[float], rel_ci: float) -> bool:
    return tight(statistics.median(samples), *median_interval(samples), rel_ci)


def summarize(samples: list[float], method: str) -> TimingStats:
    """Median and spread of the samples; computed by the parent, never by the candidate's process."""
    ordered = sorted(samples)
    mean = statistics.fmean(ordered)
    std = statistics.pstdev(ordered)
    quintiles = statistics.quantiles(ordered, n=5) if len(ordered) > 1 else ordered * 4
    low, high = median_interval(ordered)
    return TimingStats(
        median_ms=statistics.median(ordered), mean_ms=mean, min_ms=ordered[0], max_ms=ordered[-1],
        p20_ms=quintiles[0], p80_ms=quintiles[-1], std_ms=std, cv=std / mean if mean else 0.0, reps=len(ordered),
        method=method, median_ci_low_ms=low, median_ci_high_ms=high,
    )


def ratio_interval(reference: TimingStats, candidate: TimingStats) -> list[float] | None:
    """The speedup's 95 % interval from two medians timed apart: the far ends of their own intervals
    (conservative: both would have to be off in opposite directions at once)."""
    ends = (reference.median_ci_low_ms, reference.median_ci_high_ms, candidate.median_ci_low_ms, candidate.median_ci_high_ms)
    if None in ends or not all(ends[2:]):
        return None
    return [ends[0] / ends[3], ends[1] / ends[2]]
