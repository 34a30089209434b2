"""How kforge times, in the figures both sides hold it to: the child's timing loops (evaluator/child/timing.py) take
rounds of at most ROUND reps, flush these many bytes and glimpse each output at lattice_steps; kforge's own timer,
the checks of timed calls and the verdict's report rely on the same figures. Standard library only: kforge's process
reads them without importing the child's timer or torch."""

from __future__ import annotations

import functools
import math
from pathlib import Path

ROUND = 10  # reps of a round at the most, between looks at the median's interval: a rep message for more is forged
L2_FLUSH_BYTES = 256 * 2**20  # larger than any current GPU's L2 (H100: 50 MB, H200: 60 MB)
_GLIMPSED = 1024  # elements read per output by a glimpse: a share f of the work left undone is missed with (1-f)**1024


@functools.lru_cache(maxsize=64)
def lattice_steps(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Per-dimension steps that cut about _GLIMPSED elements out of a tensor of `shape`, spread over every
    dimension (the longest is halved first)."""
    counts = [1] * len(shape)
    while counts and math.prod(counts) < _GLIMPSED:
        d = max(range(len(shape)), key=lambda i: shape[i] / counts[i])
        if counts[d] >= shape[d]:
            break
        counts[d] = min(shape[d], counts[d] * 2)
    return tuple(max(1, n // c) for n, c in zip(shape, counts))


def _largest_cpu_cache() -> int:
    """Bytes of this CPU's largest cache (sysfs: "32768K"), 32 MiB where none is listed."""
    sizes = []
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = entry.read_text().strip().upper()
        unit = {"K": 2**10, "M": 2**20}.get(text[-1:], 1)
        digits = text.rstrip("KM")
        if digits.isdigit():
            sizes.append(int(digits) * unit)
    return max(sizes, default=32 * 2**20)


CPU_FLUSH_BYTES = 2 * _largest_cpu_cache()


def method_name(device: str) -> str:
    return "cuda_events+l2_flush+host_hold" if device == "cuda" else "perf_counter"


def flush_policy(device: str) -> str:
    if device == "cuda":
        return f"{L2_FLUSH_BYTES // 2**20} MiB zeroed before every timed call"
    return f"{CPU_FLUSH_BYTES // 2**20} MiB written before every timed call (twice the largest CPU cache)"
