"""The one place that times things (cf. Triton's do_bench): events + L2 flush on CUDA, perf_counter on CPU."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

from evaluator.contracts import TimingStats

_L2_FLUSH_BYTES = 256 * 2**20  # larger than any current GPU's L2 (H100: 50 MB, H200: 60 MB)
_WALL_SLACK_S = 0.1  # message latency and scheduling noise between the child's loop and the parent's clock
_CPU_MIN_WALL_S = 0.5  # below this, a busy machine's scheduling noise could pass for missing time
_CPU_MIN_SHARE = 0.25  # on CPU the samples must cover at least this share of the timed loop


def _estimate_ms(fn: Callable, sync: Callable) -> float:
    sync()
    start = time.perf_counter()
    for _ in range(3):
        fn()
    sync()
    return max((time.perf_counter() - start) * 1e3 / 3, 1e-4)


def _cuda_samples(fn: Callable, reps: int, flush_l2: bool, on_rep: Callable) -> list[float]:
    flush = torch.empty(_L2_FLUSH_BYTES if flush_l2 else 0, dtype=torch.int8, device="cuda")
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i, (start, end) in enumerate(zip(starts, ends)):
        flush.zero_()  # evict the previous call's data from L2 so every rep starts cold
        start.record()
        out = fn()
        end.record()
        on_rep(i, reps, out)  # after the end event: sees only work ordered before the timer stopped
        del out
    torch.cuda.synchronize()  # also waits for work the candidate put on other streams
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def _cpu_samples(fn: Callable, reps: int, on_rep: Callable) -> list[float]:
    samples = []
    for i in range(reps):
        start = time.perf_counter()
        out = fn()
        samples.append((time.perf_counter() - start) * 1e3)
        on_rep(i, reps, out)
        del out
    return samples


def _ignore(*_args) -> None:
    return None


def bench(fn: Callable, device: str, warmup_ms: float, rep_ms: float, min_reps: int, max_reps: int,
          flush_l2: bool = True, mark: Callable[[], None] = _ignore, on_rep: Callable = _ignore) -> list[float]:
    """Per-call times in ms: warm up for warmup_ms, then repeat for about rep_ms (within [min_reps, max_reps]).

    mark() runs just before the timed reps (the parent clocks the loop from it); on_rep(i, reps, output)
    runs after each rep's timer stopped, outside the timed region (the child snapshots outputs there).
    """
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    estimate = _estimate_ms(fn, sync)
    for _ in range(max(1, int(warmup_ms / estimate))):
        fn()
    sync()
    reps = min(max_reps, max(min_reps, int(rep_ms / estimate)))
    mark()
    return _cuda_samples(fn, reps, flush_l2, on_rep) if cuda else _cpu_samples(fn, reps, on_rep)


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


def implausible(samples: list[float], loop_wall_s: float, device: str) -> str:
    """Why reported samples cannot be true, given the parent's wall-clock of the timed loop ('' if they can).

    The samples were taken inside the loop, so they cannot add up to more than it. On CPU the loop does
    little but time, so they cannot add up to much less either (a timer patched and restored within a call,
    or work left running on a thread); on CUDA the L2 flushes between reps make "less" normal.
    """
    total = sum(samples) / 1e3
    if total > loop_wall_s * 1.05 + _WALL_SLACK_S:
        return f"the timed calls report {total:.3f} s in total, but the whole timed loop took {loop_wall_s:.3f} s of wall-clock"
    if device == "cpu" and loop_wall_s > _CPU_MIN_WALL_S and total < _CPU_MIN_SHARE * loop_wall_s - _WALL_SLACK_S:
        return f"the timed calls report {total:.3f} s in total, but the timed loop took {loop_wall_s:.3f} s of wall-clock"
    return ""
