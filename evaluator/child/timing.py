"""The one place that times things (cf. Triton's do_bench): events + L2 flush on CUDA, perf_counter on CPU."""

from __future__ import annotations

import ctypes
import math
import os
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from evaluator.child.guard import trusted
from evaluator.statistics import samples_tight
from evaluator.timing_method import CPU_FLUSH_BYTES, L2_FLUSH_BYTES, ROUND, lattice_steps

_T = torch._C.TensorBase  # the harness's own tensor reads: methods a subclass or a patch cannot replace

_MIN_FOR_INTERVAL = 20  # reps before the first look at the median's interval (then one each ROUND reps)
_PAIRS = 10  # paced: rounds are made small enough that the reps budget holds at least this many
# A paced round on CUDA is at most 5 reps: events time each call to the microsecond and a quiet GPU's paired
# ratios agree to 0.1 %, so 6 pairs of 5 settle what 10 of 10 did; the whole of level 1 warm spent 1.4 s of each
# candidate's 4.2 s on the H100 in those rounds. On CPU the scheduler's noise keeps rounds of 10.
_CUDA_ROUND = 5
_ESTIMATE_MS = 100.0  # measured calls of the estimate stop once they add up to this, at least 2 of them


def _estimate_ms(fn: Callable, sync: Callable, untimed: Callable[[], None]) -> float:
    """What one rep costs, its fill of fresh inputs included: the median of 5 after one more, or of fewer (at
    least 2) once they add up to _ESTIMATE_MS. The warmup and rep budgets are spent on both (a fill can cost more
    than a fast kernel). The first fill pays one-off costs, and on this VM one call in a few stalls for tens of
    ms: in a mean of 3 they left a 1 s budget 11 reps, in rounds of one. Its calls are warmup calls too: with the
    default budgets a call of 25 ms and more gets no other and min_reps reps whatever it is estimated at (6 calls
    of the 137 ms conv1d repair were 0.8 s of its timing stage on the H100). Each call gets fresh inputs like the
    timed ones, so a cache cannot shorten the estimate."""
    untimed()
    fn()
    sync()
    costs: list[float] = []
    while len(costs) < 5 and (len(costs) < 2 or sum(costs) < _ESTIMATE_MS):
        start = time.perf_counter()
        untimed()
        fn()
        sync()
        costs.append((time.perf_counter() - start) * 1e3)
    return max(statistics.median(costs), 1e-4)


_cuda_sleep = getattr(torch._C, "_cuda_sleep", None)  # bound at import, before candidate code (None: no CUDA build)
_CYCLES_PER_S = 3e9  # a hold's cycles are counted at this clock: at or above its seconds on any GPU clocked below it
_HOLD_FIRST_S = 1e-3  # before any rep's host span was seen
_HOLD_LEAST_S, _HOLD_MOST_S = 2e-4, 2e-2
_HOLD_MARGIN = 2.0  # a hold lasts this many times the longest host span of the last ROUND reps


class Hold:
    """A spin kernel queued at the head of every timed rep on CUDA, ahead of its fill and flush, long enough that
    the host has queued the whole rep (fill, flush, start event, the call, the glimpse, end event) before the GPU
    gets past it. The window then holds the call's device work and none of the host's: without it the GPU waited
    inside the window for the Python that launches the call and reads the glimpse, a share that moved with the
    process and the host (docs/benchmarks.md, "Reproducible CUDA timing"). Nsight Compute and
    CUPTI time only device work too; nvbench holds its launches behind a blocking kernel for the same reason.
    Queued before the fill, not after it, the hold gives work the candidate starts on another stream no more
    time beside the inputs than the flush already did. Its length follows the host spans it has seen, so a
    Python-heavy model is held long enough too (up to _HOLD_MOST_S; beyond, the host shows in the window)."""

    def __init__(self) -> None:
        self.spans: list[float] = []

    def seconds(self) -> float:
        if not self.spans:
            return _HOLD_FIRST_S
        return min(_HOLD_MOST_S, max(_HOLD_LEAST_S, _HOLD_MARGIN * max(self.spans[-ROUND:])))

    def queue(self) -> float:
        """Queue the spin; returns when the host began, to pass to `saw` once the rep is queued."""
        began = time.perf_counter()
        _cuda_sleep(int(self.seconds() * _CYCLES_PER_S))
        return began

    def saw(self, began: float) -> None:
        self.spans.append(time.perf_counter() - began)


def _cuda_round(fn: Callable, first: int, n: int, flush: torch.Tensor, least: int, on_rep: Callable,
                fresh: Callable[[int], None], hold: Hold | None = None) -> list[float]:
    hold = hold or Hold()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for k, (start, end) in enumerate(zip(starts, ends)):
        began = hold.queue()  # the GPU spins while the host queues the rest of the rep
        fresh(first + k)  # stream-ordered before the flush: the new inputs do not sit in L2 either
        flush.zero_()  # evict the previous call's data from L2 so every rep starts cold
        start.record()
        out = fn()
        seen = glimpse(out, "cuda")  # inside the window: what the outputs held when the timer stopped
        end.record()
        hold.saw(began)
        on_rep(first + k, least, k == n - 1, out, seen)  # after the end event: sees only work ordered before the timer stopped
        del out
    torch.cuda.synchronize()  # also waits for work the candidate put on other streams
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


_PAGE = 4096


def _span(t: torch.Tensor) -> int:
    """Bytes from a tensor's first element to the end of its last (its strides' reach)."""
    size, stride = _T.size(t), _T.stride(t)
    if 0 in size:
        return 0
    return (1 + sum((n - 1) * s for n, s in zip(size, stride))) * _T.element_size(t)


def touch(out) -> None:
    """Read one byte of every page a call's CPU outputs occupy, inside its timed window. Output memory that
    fills itself when first read (pages kept unreadable, computed by a fault handler after the timer stopped,
    when the harness reads them) is then computed on the clock. The read is plain C (a strided memoryview copied
    into bytes), out of the dispatcher's reach; both sides pay it, a few loads per page."""
    for t in out if isinstance(out, (tuple, list)) else [out]:
        if type(t) is torch.Tensor and _T.device.__get__(t).type == "cpu" and (span := _span(t)):
            bytes(memoryview((ctypes.c_char * span).from_address(_T.data_ptr(t))).cast("B")[::_PAGE])


@dataclass
class Glimpse:
    """Elements of one output read inside its timed window: those at start + k * step along each dimension
    (the starts drawn after the call returned), and their values, still on the device."""

    start: tuple[int, ...]
    step: tuple[int, ...]
    values: torch.Tensor

    @classmethod
    def of(cls, t: torch.Tensor) -> "Glimpse":
        """The lattice of a non-empty plain tensor at starts drawn now (from the kernel's random source: no
        state in the process to read ahead), copied (stream-ordered on CUDA). Its caller holds modes off."""
        step = lattice_steps(tuple(_T.size(t)))
        drawn, start = int.from_bytes(os.urandom(8 * len(step))), []
        for s in step:
            drawn, a = divmod(drawn, s)
            start.append(a)
        return cls(tuple(start), step, _T.clone(lattice_of(t, start, step)))

    def describe(self) -> dict:
        """For the comparer: where the elements were, and their bytes (a host copy, made after timing)."""
        raw = _T.view(_T.reshape(_T.cpu(self.values), (-1,)), torch.uint8)
        return {"start": list(self.start), "step": list(self.step), "bytes": bytes(_T.tolist(raw)).hex()}


def lattice_of(t: torch.Tensor, start: tuple[int, ...] | list[int], step: tuple[int, ...] | list[int]) -> torch.Tensor:
    """The elements of `t` a glimpse reads: t[a::b, ...] along each dimension, as one strided view (no copy;
    a fifth of the cost of indexing)."""
    stride = _T.stride(t)
    return _T.as_strided(t, [-((a - n) // b) for a, b, n in zip(start, step, _T.size(t))],
                         [s * b for s, b in zip(stride, step)],
                         _T.storage_offset(t) + sum(a * s for a, s in zip(start, stride)))


def glimpse(out, device: str) -> list[Glimpse | None]:
    """About 1024 elements of every plain, non-empty output on `device`, copied inside the timed window on
    both sides: one small gather each (stream-ordered after the call on CUDA), at places drawn only now. The
    comparer holds the call's snapshot to them, so work done after the timer stopped and before the snapshot
    (kernels a thread, a hook or a garbage-collector callback queues past the end event; on CPU a fill too cheap
    for the wall-clock check to see) cannot pass: its outputs were not there yet when the glimpse read them. A
    full copy inside the window would do the same, but moved the repairs' speedups on an H100 by up to 25 % (a
    2 GB output copied beside a 5 ms reference); the glimpse costs both sides a few microseconds per output."""
    with trusted():
        return [Glimpse.of(t) if type(t) is torch.Tensor and _T.device.__get__(t).type == device and _T.numel(t)
                else None for t in (out if isinstance(out, (tuple, list)) else [out])]


def _cpu_round(fn: Callable, first: int, n: int, least: int, on_rep: Callable, fresh: Callable[[int], None]) -> list[float]:
    samples = []
    for k in range(n):
        fresh(first + k)
        start = time.perf_counter()
        out = fn()
        touch(out)
        seen = glimpse(out, "cpu")
        samples.append((time.perf_counter() - start) * 1e3)
        on_rep(first + k, least, k == n - 1, out, seen)
        del out
    return samples


def _ignore(*_args) -> None:
    return None


def cpu_flush_buffer() -> torch.Tensor:
    """What is written before every timed call on CPU (twice the largest cache), so that every call starts from
    the same cold caches whatever ran before it. Without it, two processes taking turns on one core with the
    same code timed 0.92-1.16x each other, each pair steady; with it, 0.97-1.02x (benchmarks/cpu_alternation.py): a CPU call's time
    depended on which of the pair's data the caches still held."""
    return torch.zeros(CPU_FLUSH_BYTES // 4)


def flush_buffer(device: str, flush_l2: bool = True) -> torch.Tensor | None:
    """What is zeroed before every timed call on CUDA to evict L2 (None on CPU)."""
    return torch.empty(L2_FLUSH_BYTES if flush_l2 else 0, dtype=torch.int8, device="cuda") if device == "cuda" else None


def _round(fn: Callable, device: str, first: int, n: int, flush: torch.Tensor | None, least: int, on_rep: Callable,
           fresh: Callable[[int], None], hold: Hold | None = None) -> list[float]:
    if device == "cuda":
        return _cuda_round(fn, first, n, flush, least, on_rep, fresh, hold)
    return _cpu_round(fn, first, n, least, on_rep, fresh)


def block(fn: Callable, device: str, first: int, n: int, flush: torch.Tensor | None,
          fresh: Callable[[int], None] = _ignore, on_rep: Callable = _ignore) -> list[float]:
    """n timed calls as bench's rounds take them (fresh inputs of reps first.., `flush` zeroed on CUDA, on_rep
    after each): the other side of a paired round, timed right beside the candidate's (see paired_ratio)."""
    return _round(fn, device, first, n, flush, n, on_rep, fresh)


@dataclass
class Pace:
    """What bench tells its `pace` hook before each round (reps > 0) and after the last (reps == 0): where the
    round starts, its size, the samples of the round before, and the reps sure to run (`least`). The hook
    answers whether to go on; bench stops only at or past `least`."""

    first: int
    reps: int
    last_round: list[float]
    least: int


def bench(fn: Callable, device: str, warmup_ms: float, rep_ms: float, min_reps: int, max_reps: int,
          flush_l2: bool = True, mark: Callable[[int], None] = _ignore, on_rep: Callable = _ignore,
          rel_ci: float | None = None, fresh: Callable[[int], None] = _ignore,
          pace: Callable[[Pace], bool] | None = None) -> list[float]:
    """Per-call times in ms: warm up for warmup_ms (the estimate's calls included), then repeat for about rep_ms (within
    [min_reps, max_reps]). With rel_ci, stop earlier, at the end of a round of ROUND reps, once at least
    _MIN_FOR_INTERVAL (and min_reps) were taken and the median's 95 % interval is within +-rel_ci of it: a steady
    kernel is timed in tens of reps instead of a second. With `pace`, rounds are made small enough for _PAIRS of
    them and the hook decides when to stop instead (the parent times the reference beside each round and watches the
    ratio).

    fresh(i) runs before every call, outside the timed region (on CUDA before the L2 flush): i >= 0 is timed
    rep i, a negative i an untimed call (estimate, warmup); the caller writes new input values there.
    mark(untimed_calls) runs just before the timed reps (the parent clocks the loop from it); on_rep(i, least,
    checkpoint, output, seen) runs after each rep's timer stopped, outside the timed region: `least` reps will
    run whatever the interval says, `checkpoint` marks a rep that may be the last (the child snapshots outputs
    there), and `seen` is what glimpse read of the outputs inside the window.
    """
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    untimed_calls = 0

    def untimed() -> None:
        nonlocal untimed_calls
        untimed_calls += 1
        fresh(-untimed_calls)

    began = time.perf_counter()
    estimate = _estimate_ms(fn, sync, untimed)
    warm_ms = warmup_ms - (time.perf_counter() - began) * 1e3  # the estimate's calls (fresh inputs, untimed) warm too
    for _ in range(max(0, math.ceil(warm_ms / estimate))):
        untimed()
        fn()
    sync()
    most = min(max_reps, max(min_reps, int(rep_ms / estimate)))
    if pace is not None:  # small rounds, at least _PAIRS of them; the hook decides after `least`
        size = max(1, min(_CUDA_ROUND if device == "cuda" else ROUND, most // _PAIRS))
        least = min(most, max(min_reps, _MIN_FOR_INTERVAL))
    elif rel_ci is not None:  # rounds of ROUND until the interval is tight
        size, least = ROUND, min(most, max(min_reps, _MIN_FOR_INTERVAL))
    else:  # the whole budget in one go
        size, least = most, most
    flush = flush_buffer(device, flush_l2)
    hold = Hold()  # one for every round: its length follows this call's host spans
    mark(untimed_calls)
    samples: list[float] = []
    last: list[float] = []
    while len(samples) < most:
        n, first = min(size, most - len(samples)), len(samples)
        if pace is not None:
            go, last = pace(Pace(first, n, last, least)), []
            if not go and first >= least:
                break
        last = _round(fn, device, first, n, flush, least, on_rep, fresh, hold)
        samples += last
        if pace is None and rel_ci is not None and len(samples) >= least and samples_tight(samples, rel_ci):
            break
    if pace is not None and last:  # the last round, not yet told: its pair may still be owed
        pace(Pace(len(samples), 0, last, least))
    return samples
