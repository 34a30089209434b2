"""The one place that times things (cf. Triton's do_bench): events + L2 flush on CUDA, perf_counter on CPU."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

from evaluator.contracts import TimingStats

_L2_FLUSH_BYTES = 256 * 2**20  # larger than any current GPU's L2 (H100: 50 MB, H200: 60 MB)


def _estimate_ms(fn: Callable, sync: Callable) -> float:
    sync()
    start = time.perf_counter()
    for _ in range(3):
        fn()
    sync()
    return max((time.perf_counter() - start) * 1e3 / 3, 1e-4)


def _cuda_samples(fn: Callable, reps: int, flush_l2: bool) -> list[float]:
    flush = torch.empty(_L2_FLUSH_BYTES if flush_l2 else 0, dtype=torch.int8, device="cuda")
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends):
        flush.zero_()  # evict the previous call's data from L2 so every rep starts cold
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()  # also waits for work the candidate put on other streams
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def _cpu_samples(fn: Callable, reps: int) -> list[float]:
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def bench(fn: Callable, device: str, warmup_ms: float, rep_ms: float, min_reps: int, max_reps: int,
          flush_l2: bool = True) -> list[float]:
    """Per-call times in ms: warm up for warmup_ms, then repeat for about rep_ms (within [min_reps, max_reps])."""
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    estimate = _estimate_ms(fn, sync)
    for _ in range(max(1, int(warmup_ms / estimate))):
        fn()
    sync()
    reps = min(max_reps, max(min_reps, int(rep_ms / estimate)))
    return _cuda_samples(fn, reps, flush_l2) if cuda else _cpu_samples(fn, reps)


def summarize(samples: list[float], method: str) -> TimingStats:
    """Median and spread of the samples; computed by the parent, never by the candidate's process."""
    ordered = sorted(samples)
    mean = statistics.fmean(ordered)
    std = statistics.pstdev(ordered)
    quintiles = statistics.quantiles(ordered, n=5) if len(ordered) > 1 else ordered * 4
    return TimingStats(
        median_ms=statistics.median(ordered), mean_ms=mean, min_ms=ordered[0], max_ms=ordered[-1],
        p20_ms=quintiles[0], p80_ms=quintiles[-1], std_ms=std, cv=std / mean if mean else 0.0, reps=len(ordered),
        method=method,
    )


def method_name(device: str) -> str:
    return "cuda_events+l2_flush" if device == "cuda" else "perf_counter"
