"""The one timing function: how many reps it takes, and the median's interval it reports."""

from __future__ import annotations

import time

import pytest

from evaluator.timing import bench, median_interval, summarize


def test_the_median_interval_is_the_order_statistics_around_the_middle():
    samples = list(range(1, 101))  # 1..100: ranks 40 and 60 (0-based 40 and 59) bound the median's 95 % interval
    low, high = median_interval(samples)
    assert (low, high) == (41, 60)
    stats = summarize([float(x) for x in samples], "perf_counter")
    assert stats.median_ci_low_ms <= stats.median_ms <= stats.median_ci_high_ms


def _steady() -> None:
    end = time.perf_counter() + 0.002  # 2 ms of busy work: the same every call, on a quiet core
    while time.perf_counter() < end:
        pass


def test_a_steady_call_stops_once_its_median_is_known_and_a_fixed_budget_does_not():
    seen = []
    adaptive = bench(_steady, "cpu", 10, 1000, 10, 1000, rel_ci=0.005,
                     on_rep=lambda i, least, last, out: seen.append((i, least, last)))
    assert 20 <= len(adaptive) < 100  # a 1 s budget would be ~500 reps
    low, high = median_interval(adaptive)
    assert (high - low) / 2 <= 0.005 * sorted(adaptive)[len(adaptive) // 2] * 1.01
    assert seen[-1][2] and all(i == k for k, (i, _, _) in enumerate(seen)) and {least for _, least, _ in seen} == {20}
    fixed = bench(_steady, "cpu", 10, 200, 10, 1000, rel_ci=None)
    assert len(fixed) >= 90  # about rep_ms / 2 ms


@pytest.mark.parametrize("rel_ci", [0.005, None])
def test_min_and_max_reps_bound_every_run(rel_ci):
    assert len(bench(_steady, "cpu", 1, 10, 30, 1000, rel_ci=rel_ci)) >= 30
    assert len(bench(_steady, "cpu", 1, 5000, 5, 15, rel_ci=rel_ci)) <= 15
