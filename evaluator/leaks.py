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
        snap["cuda_driver_used"] = torch.cuda.mem_get_info()[1] - torch.cuda.mem_get_info()[0]  # sees raw cudaMalloc
    return snap


def measure_growth(call, device: str, calls: int) -> dict[str, list[int]]:
    """Growth per key over two consecutive windows of `calls` calls each, after one warm call.

    A leak grows in both windows; one-time workspaces and caches grow only before the first.
    """
    with torch.no_grad():
        call()
        snaps = [_snapshot(device)]
        for _ in range(2):
            for _ in range(calls):
                call()
            snaps.append(_snapshot(device))
    return {k: [snaps[1][k] - snaps[0][k], snaps[2][k] - snaps[1][k]] for k in snaps[0]}
