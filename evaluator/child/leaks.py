"""Stage 3 (in the child): does memory grow with every call? Torch allocator, raw device memory and host RSS."""

from __future__ import annotations

import gc
import os

import torch


def rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _snapshot(device: str) -> dict[str, int]:
    gc.collect()
    snap = {"host_rss": rss()}
    if device == "cuda":
        torch.cuda.synchronize()
        snap["cuda_allocated"] = torch.cuda.memory_allocated()
        snap["cuda_reserved"] = torch.cuda.memory_reserved()
        # raw cudaMalloc too, but of every process on the device: judged only where the parent cannot read the
        # candidate's own processes (evaluator.sandbox.gpumemory)
        snap["cuda_driver_used"] = torch.cuda.mem_get_info()[1] - torch.cuda.mem_get_info()[0]
    return snap


_WINDOW_MS = 250.0  # a window's calls stop at about this much of the calls' time...
_LEAST_CALLS = 4  # ...but never below this many: a slow call's window is 4 calls, a fast one's all of `most`


def window_calls(call_ms: float, most: int) -> int:
    """Calls per window, from what one call costs: the 137 ms conv1d repair spent 2.9 s on 21 calls (H100).
    Fewer calls make a window less sensitive to a small leak (1 MiB of allocator growth per window: 100 KiB a
    call over 10 calls, 256 KiB over 4), which only a call slower than 25 ms gets."""
    return max(min(_LEAST_CALLS, most), min(most, int(_WINDOW_MS / max(call_ms, 1e-3))))


def measure_growth(call, device: str, most: int, call_ms: float, mark=lambda which: None) -> tuple[dict[str, list[int]], int]:
    """Growth per key over two consecutive windows of calls each (window_calls of `call_ms`, what one call
    took in the trials), and that number. A leak grows in both windows; one-time workspaces and caches (a first
    call on these inputs) grow only in the first. `mark(i)` after each snapshot: the parent reads the device
    memory of this child's processes then (evaluator.sandbox.gpumemory). No warm call first: it only measured what the
    trials already had, and cost a call of every candidate on the GPU (137 ms for the conv1d repair)."""
    calls = window_calls(call_ms, most)
    with torch.no_grad():
        snaps = [_snapshot(device)]
        mark(0)
        for i in range(2):
            for _ in range(calls):
                call()
            snaps.append(_snapshot(device))
            mark(i + 1)
    return {k: [snaps[1][k] - snaps[0][k], snaps[2][k] - snaps[1][k]] for k in snaps[0]}, calls
