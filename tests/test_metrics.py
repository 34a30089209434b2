"""db.metrics on numbers worked out by hand: fast_p of both kinds (samples and problems), the geometric mean, and a
rate's fraction of the device's peak; and the callers that report them agree with it."""

from __future__ import annotations

import math

import pytest

from db import Database, metrics
from kforge import kernelbench


def test_fast_p_counts_wrong_ones_in_n_and_never_above_p():
    # 5 units: three correct (0.5x, 1.2x, 3x), two wrong ones that have no speedup to count
    assert metrics.fast_p([0.5, 1.2, 3.0], 5) == {0.0: 3 / 5, 1.0: 2 / 5, 1.5: 1 / 5, 2.0: 1 / 5}
    assert metrics.fast_p([1.0], 1, (1.0,)) == {1.0: 0.0}  # faster than p, not as fast as p
    assert metrics.fast_p((s for s in [2.0, 4.0]), 2, [3]) == {3.0: 0.5}  # any iterable; thresholds become floats


def test_fast_p_of_nothing_is_empty():
    assert metrics.fast_p([], 0) == {}
    assert metrics.fast_p([], 3) == {0.0: 0.0, 1.0: 0.0, 1.5: 0.0, 2.0: 0.0}  # three wrong samples


def test_geomean_of_ratios():
    assert metrics.geomean([2.0, 0.5]) == pytest.approx(1.0, rel=1e-15)
    assert metrics.geomean([1.0, 3.0, 9.0]) == pytest.approx(3.0, rel=1e-15)
    assert metrics.geomean(iter([4.0])) == 4.0
    assert metrics.geomean([]) is None


def test_fraction_of_peak():
    assert metrics.fraction_of_peak(2.4e12, 4.8e12) == 0.5
    assert metrics.fraction_of_peak(None, 4.8e12) is None  # no cost known
    assert metrics.fraction_of_peak(1e9, None) is None  # a CPU: no single bandwidth peak


@pytest.fixture
def db(tmp_path):
    """Two problems on one device: A with samples of 3x (correct), 0.8x (correct), one wrong, one skipped; B with one
    correct sample of 1.2x."""
    with Database(f"sqlite:///{tmp_path / 'k.db'}") as database:
        for problem in ("A", "B"):
            database.upsert_problem(problem, 1, f"{problem}.py", "0" * 64)
        samples = [("A", "correct", 3.0), ("A", "correct", 0.8), ("A", "incorrect", None), ("A", "skipped", None),
                   ("B", "correct", 1.2)]
        for i, (problem, status, speedup) in enumerate(samples):
            sha = f"{i:064x}"
            database.upsert_solution(sha, problem, f"# {i}")
            database.add_evaluation(sha, status=status, speedup=speedup, device="cuda", device_name="H100", size="full")
        yield database


def test_both_kinds_of_fast_p_and_the_geomean_come_from_the_one_formula(db):
    # KernelBench's: 4 judged samples (the skipped one never ran), correct speedups 3, 0.8 and 1.2
    assert kernelbench.fast_p(db) == (metrics.fast_p([3.0, 0.8, 1.2], 4), 4) == ({0.0: 0.75, 1.0: 0.5, 1.5: 0.25, 2.0: 0.25}, 4)
    # best-of-k: 2 problems, best 3 and 1.2
    assert db.problem_fast_p() == metrics.fast_p([3.0, 1.2], 2) == {0.0: 1.0, 1.0: 1.0, 1.5: 0.5, 2.0: 0.5}
    assert db.geomean_speedup() == pytest.approx(math.sqrt(3.0 * 1.2), rel=1e-12)
