"""The leak check's windows: their size comes from what a call costs, and a leak still grows in both."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

from conftest import ROOT
from evaluator.child.leaks import measure_growth, window_calls


def test_a_window_holds_about_a_quarter_second_of_calls_but_never_fewer_than_four():
    assert window_calls(0.5, 10) == 10  # fast: every call the settings allow
    assert window_calls(50.0, 10) == 5
    assert window_calls(137.0, 10) == 4  # the conv1d repair: 4 calls a window, not 10
    assert window_calls(137.0, 2) == 2  # never more than asked


_SLOW_LEAK = """
import json, time, torch
from evaluator.child.main import _steady_malloc
from evaluator.child.leaks import measure_growth
_steady_malloc()
kept = []
def call():
    time.sleep(0.1)
    kept.append(torch.ones(8 * 2**20, dtype=torch.uint8) + 1)  # 8 MiB a call, never freed: 32 MiB a window
growth, calls = measure_growth(call, "cpu", 10, call_ms=100.0)
print(json.dumps({"growth": growth["host_rss"], "calls": calls, "kept": len(kept)}))
"""


def test_a_slow_call_that_keeps_memory_is_caught_in_fewer_calls():
    """In a fresh process with the child's malloc settings: in pytest's own process, heap holes freed by earlier
    tests took in a window's first 16 MiB (in CI: 16 MiB of growth for 32 MiB kept)."""
    ran = subprocess.run([sys.executable, "-c", _SLOW_LEAK], capture_output=True, text=True, timeout=120,
                         cwd=ROOT, check=True)
    got = json.loads(ran.stdout)
    assert got["calls"] == 4 and got["kept"] == 8  # two windows of 4 (not 21 calls: 2.1 s), no warm call before
    assert min(got["growth"]) >= 24 * 2**20


def test_a_cache_made_by_the_first_call_grows_only_the_first_window():
    """No warm call before the windows: what a first call on the timing inputs keeps is the first window's, and
    a leak is growth in both."""
    kept = []

    def call():
        if not kept:
            kept.append(torch.ones(32 * 2**20, dtype=torch.uint8) + 1)
    growth, calls = measure_growth(call, "cpu", 10, call_ms=0.1)
    assert calls == 10
    assert growth["host_rss"][0] >= 24 * 2**20 and growth["host_rss"][1] < 2**20
