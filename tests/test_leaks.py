"""The leak check's windows: their size comes from what a call costs, and a leak still grows in both."""

from __future__ import annotations

import time

import torch

from evaluator.leaks import measure_growth, window_calls


def test_a_window_holds_about_a_quarter_second_of_calls_but_never_fewer_than_four():
    assert window_calls(0.5, 10) == 10  # fast: every call the settings allow
    assert window_calls(50.0, 10) == 5
    assert window_calls(137.0, 10) == 4  # the conv1d repair: 4 calls a window, not 10
    assert window_calls(137.0, 2) == 2  # never more than asked


def test_a_slow_call_that_keeps_memory_is_caught_in_fewer_calls():
    kept = []

    def call():
        time.sleep(0.1)
        kept.append(torch.ones(8 * 2**20, dtype=torch.uint8) + 1)  # 8 MiB a call, never freed: 32 MiB a window
    growth, calls = measure_growth(call, "cpu", 10)
    assert calls == 4 and len(kept) == 9  # one warm call, then two windows of 4 (not 21 calls: 2.1 s)
    assert min(growth["host_rss"]) >= 24 * 2**20
