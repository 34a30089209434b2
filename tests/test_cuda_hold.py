"""The length of the hold queued ahead of each timed CUDA rep (timing.Hold): pure arithmetic, no GPU."""

from __future__ import annotations

from evaluator.child import timing
from evaluator.timing_method import ROUND


def test_the_first_rep_is_held_before_any_span_was_seen():
    assert timing.Hold().seconds() == timing._HOLD_FIRST_S


def test_the_hold_follows_the_longest_recent_host_span_within_its_bounds():
    hold = timing.Hold()
    hold.spans = [1e-5] * 20
    assert hold.seconds() == timing._HOLD_LEAST_S  # a fast host: the floor
    hold.spans = [1e-5] * 19 + [3e-4]
    assert hold.seconds() == timing._HOLD_MARGIN * 3e-4  # one slow rep among the last ROUND sets it
    hold.spans = [3e-4] + [1e-5] * ROUND
    assert hold.seconds() == timing._HOLD_LEAST_S  # older than ROUND reps: forgotten
    hold.spans = [1.0]
    assert hold.seconds() == timing._HOLD_MOST_S  # a host slower than the cap: capped (its excess shows in the window)
