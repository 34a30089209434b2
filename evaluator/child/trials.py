"""Stage 2 (in the child): build a model and run it on seeded inputs; outputs go to files for the parent to judge.

Every tensor operation of the harness itself runs under guard.trusted() and through torch._C.TensorBase's
(immutable) methods, so neither a tensor subclass nor a mode the candidate installed can fake what is saved.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import time
from pathlib import Path
from types import ModuleType
from typing import Callable

import torch

from evaluator.child import ipc, timing
from evaluator.child.failures import WRITE, own
from evaluator.child.guard import trusted
from evaluator.labels import OUTPUT_SUFFIX, TIMED

_T = torch._C.TensorBase

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}  # KernelBench's precisions
# This child's precision: set once from its request (set_precision) before any problem or candidate code runs;
# the guard holds a harness module's dtype values, so a candidate cannot reassign it.
dtype = torch.float32


def set_precision(precision: str) -> None:
    global dtype
    dtype = DTYPES[precision]


def cast(value):
    """KernelBench's cast of an input at half precision: a floating-point tensor to the precision's dtype; integer
    and boolean tensors, and anything not a tensor, as they are. At fp32 nothing is cast: a problem that makes
    float64 or 8-bit inputs on purpose is judged on them, as before precisions existed."""
    if dtype is not torch.float32 and isinstance(value, torch.Tensor) and _T.is_floating_point(value):
        return _T.to(value, dtype)
    return value


def as_tensors(value) -> list:
    """Normalise a forward() result to a list (a tensor, or a tuple/list of them)."""
    return list(value) if isinstance(value, (tuple, list)) else [value]


def _is_plain(value) -> bool:
    return type(value) is torch.Tensor


_FILLERS = frozenset({torch.rand, torch.randn, torch.randint, torch.zeros, torch.ones, torch.empty, torch.full})


def _on_meta(func, args: tuple, kwargs: dict) -> torch.Tensor:
    """A factory call's result on the meta device: its shape and dtype, no data. randn's and randint's meta
    kernels are Python decompositions whose first use imports 487 modules (sympy among them): 0.3 s on the CI
    machine, ~1.8 s of the timing stage of a randn problem on the H100 host. rand takes randn's arguments and
    empty randint's size, with the same result shape and dtype, and load nothing."""
    kwargs = {**kwargs, "device": "meta"}
    if func is torch.randn:
        return torch.rand(*args, **kwargs)
    if func is torch.randint:  # randint(high, size) or randint(low, high, size), any of them by keyword
        size = kwargs.pop("size") if "size" in kwargs else args[-1]  # size=() is a size
        for name in ("low", "high", "generator"):
            kwargs.pop(name, None)
        return torch.empty(size, **{"dtype": torch.int64, **kwargs})
    return func(*args, **kwargs)


class _Into(torch.overrides.TorchFunctionMode):
    """While get_inputs runs: a factory call whose result has the shape and dtype of one of `targets` (the
    inputs being refilled) writes into it (`out=`) instead of allocating, so refilling the usual
    `torch.rand(...)` input needs no second copy of it (a 17 GB input and its refill did not fit one GPU
    beside the comparer). The values are the same as without `out=`: same generator, same numel."""

    def __init__(self, targets: list):
        super().__init__()
        self.free = [t for t in targets if isinstance(t, torch.Tensor)]

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _FILLERS and "out" not in kwargs and self.free:
            probe = _on_meta(func, args, kwargs)
            for i, t in enumerate(self.free):
                if _T.shape.__get__(t) == probe.shape and _T.dtype.__get__(t) == probe.dtype:
                    return func(*args, **kwargs, out=self.free.pop(i))
        return func(*args, **kwargs)


def make_inputs(problem: ModuleType, seed: int, device: str, into: list | None = None) -> list:
    """Inputs are created directly on the device, from a seed only the parent knows until now. Not under
    trusted(): that would also switch off the device context (a TorchFunctionMode) and build them on the CPU;
    a mode the candidate left active is caught by the guard, and subclass overrides are off here. With `into`
    (the tensors of an earlier call), new values are written into those tensors where the problem allows. The
    floating-point ones are cast to the precision here, the one place inputs are made, so a refill makes the same
    dtype: at half precision they are made in float32 (the same values as the reference's) and cast, and the
    refill copies them into the half tensors already there (_fits)."""
    with torch._C.DisableTorchFunctionSubclass(), torch._C._DisableTorchDispatch(), torch.device(device):
        torch.manual_seed(seed)
        if into is None:
            return [cast(v) for v in problem.get_inputs()]
        with _Into(into):
            return [cast(v) for v in problem.get_inputs()]


def build_model(cls: type, problem: ModuleType, seed: int, device: str) -> torch.nn.Module:
    """Reference and candidate are built under the same seed, so same-shaped parameters get the same values, and
    cast to the precision as KernelBench casts both (`.to(device, dtype)`): their init inputs too."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = cls(*[cast(v) for v in problem.get_init_inputs()])
    if not isinstance(model, torch.nn.Module):
        return model
    return (model.to(device) if dtype is torch.float32 else model.to(device, dtype)).eval()


def describe(value) -> dict:
    """What the parent needs to judge structure; only type() is asked of an object that is not a plain tensor."""
    if not _is_plain(value):
        return {"type": str(type(value).__name__), "exact_tensor": False}
    return {"type": "Tensor", "exact_tensor": True, "shape": list(_T.shape.__get__(value)),
            "dtype": str(_T.dtype.__get__(value)), "device": _T.device.__get__(value).type}


_ROW = 4096  # words a row of the checksum's view
_LCG = 6364136223846793005  # Knuth's MMIX multiplier: position weights that look random, made on the device


def _words(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as int64 words (8-byte elements), else int32 words where its bytes divide into them,
    else its bytes: a view, never a copy of a contiguous tensor."""
    flat = _T.reshape(_T.detach(t), (-1,))
    if _T.element_size(flat) == 8:
        return _T.view(flat, torch.int64)
    raw = _T.view(flat, torch.uint8)
    return _T.view(raw, torch.int32) if _T.numel(raw) % 4 == 0 and _T.storage_offset(raw) % 4 == 0 else raw


def _weighted(sums: torch.Tensor, salt: int) -> torch.Tensor:
    """sum(w_i * sums_i) mod 2**64, with a pseudo-random weight per position (int64 arithmetic wraps)."""
    weights = _T.add(_T.mul(torch.arange(_T.numel(sums), dtype=torch.int64, device=sums.device), _LCG), salt)
    return _T.sum(_T.mul(_T.to(sums, torch.int64), weights))


def _checksum(t: torch.Tensor) -> int:
    """A position-weighted checksum of the bits (mod 2**64): the words as rows of _ROW, each row's sum and each
    column's sum weighted by its position. A plain sum missed writes that keep it: two elements swapped, an
    input used as scratch for an in-place transpose or sort; any swap of two different words now moves a row or
    a column sum. The sums wrap in the words' own type: torch upcasts a wider sum by copying the whole tensor
    (12.8 GB for a 6.4 GB fp32 input: an out-of-memory on the H100). One host sync."""
    words = _words(t)
    whole = _T.numel(words) // _ROW * _ROW
    body, tail, own = _T.view(words[:whole], (-1, _ROW)), words[whole:], _T.dtype.__get__(words)
    parts = [_weighted(_T.sum(body, 1, dtype=own), 1442695040888963407),
             _weighted(_T.sum(body, 0, dtype=own), 1013904223), _weighted(tail, 7)]
    return int(_T.item(_T.sum(torch.stack(parts)))) % 2**64


def fingerprint(tensors: list) -> list[int]:
    """Detects a candidate that writes into its inputs (_checksum: any one changed element or swapped pair)."""
    with trusted(), own("checksum of the inputs", nbytes(tensors)):
        return [_checksum(t) if isinstance(t, torch.Tensor) else 0 for t in tensors]


def snapshot(outputs: list) -> list:
    """Copies of the plain-tensor outputs as they are now (stream-ordered on CUDA); None for anything else."""
    with trusted(), own("copy of the outputs", nbytes(outputs)):
        return [_T.clone(o) if _is_plain(o) else None for o in outputs]


def _raw_bytes(value) -> torch.Tensor | None:
    """A plain tensor's elements as one contiguous run of bytes (still on its device); None for anything else."""
    if not _is_plain(value):
        return None
    flat = _T.reshape(_T.contiguous(_T.detach(value)), (-1,))
    return _T.view(flat, torch.uint8)


def _write(fd: int, host: torch.Tensor) -> None:
    """write() the bytes of a contiguous CPU uint8 tensor: the kernel fills the file's pages itself (a copy into
    mapped pages page-faults every 4 KiB and ran at ~1 GB/s)."""
    view = memoryview((ctypes.c_char * _T.numel(host)).from_address(_T.data_ptr(host))).cast("B")
    while view:
        view = view[os.write(fd, view):]


def save_outputs(outputs: list, fd: int) -> list[dict]:
    """The raw bytes of the plain CPU-tensor outputs, back to back: no pickling. The description returned, which
    goes over the result channel, is what the comparer reads them back by; nothing of the candidate's objects
    crosses over."""
    with trusted(), own(WRITE, nbytes(outputs)):
        for raw in map(_raw_bytes, outputs):
            if raw is not None and _T.numel(raw) and _T.device.__get__(raw).type == "cpu":
                _write(fd, raw)
    return [describe(o) for o in outputs]


def handoff(out_dir: Path, device: str, send: Callable[[str, list[dict]], None]) -> Callable[..., list[dict]]:
    """How a candidate's outputs reach the trusted comparer; `send(label, descriptions)` returns once the parent
    says they are judged. On CUDA the descriptions carry IPC handles to the outputs' own device memory, kept alive
    until then: nothing is copied to the host. On CPU the raw bytes go to a file in the out dir first. A timed
    call's descriptions carry what its timed window read of each output (`seen`, timing.glimpse), for the
    comparer to hold the snapshot against."""
    def save(tensors: list, name: str, seen: list | None = None) -> list[dict]:
        described = [describe(o) for o in tensors]
        glimpsed = [meta | {"seen": g.describe()} if g is not None else meta
                    for meta, g in zip(described, seen or [None] * len(described))]
        if device != "cuda":
            fd = os.open(out_dir / f"{name}{OUTPUT_SUFFIX}", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                save_outputs(tensors, fd)
            finally:
                os.close(fd)
            send(name, glimpsed)
            return described
        with trusted(), own("handoff of the outputs", nbytes(tensors)):
            raws = [_raw_bytes(o) for o in tensors]
            torch.cuda.synchronize()
            shared = [meta | {"ipc": ipc.export(_T.data_ptr(raw))} if raw is not None and _T.numel(raw)
                      and meta["device"] == "cuda" else meta for meta, raw in zip(glimpsed, raws)]
        send(name, shared)
        del raws
        return described
    return save


def nbytes(tensors: list) -> int:
    with trusted():
        return sum(_T.numel(t) * _T.element_size(t) for t in tensors if isinstance(t, torch.Tensor))


def run_one(model, inputs: list, watch):
    """One forward call, counted by the kernel watch (evaluator/child/watches.py) when there is one."""
    if watch is None:
        return model(*inputs), None
    return watch.call(lambda: model(*inputs))


def run_trials(model, problem: ModuleType, seeds: list[tuple[str, int]], device: str, save: Callable, sync,
               watch=None) -> dict[str, dict]:
    """One call per (label, seed), in the given order; per label: output description, input checksums
    before/after, bytes in and out, its wall time, and (with a watch) how often the candidate's own kernels ran."""
    report = {}
    with torch.no_grad():
        for label, seed in seeds:
            inputs = make_inputs(problem, seed, device)
            before = fingerprint(inputs)
            start = time.perf_counter()
            value, calls = run_one(model, inputs, watch)
            outputs = as_tensors(value)
            sync()
            call_ms = (time.perf_counter() - start) * 1e3
            report[label] = {
                "call_ms": call_ms,
                "outputs": save(outputs, label),
                "inputs_changed": fingerprint(inputs) != before,
                "max_input_numel": max((t.numel() for t in inputs if isinstance(t, torch.Tensor)), default=0),
                "io_bytes": nbytes(inputs) + nbytes(outputs),
                "calls": calls.model_dump() if calls else None,
            }
            del inputs, outputs, value
    return report


def _aliased(targets: list, fresh: list) -> bool:
    """Whether a new input that is not its own target shares memory with one of the targets."""
    stores = {_T.untyped_storage(t).data_ptr() for t in targets if isinstance(t, torch.Tensor)}
    return any(isinstance(b, torch.Tensor) and b is not a and _T.untyped_storage(b).data_ptr() in stores
               for a, b in zip(targets, fresh))


def _fits(inputs: list, fresh: list) -> bool:
    return len(fresh) == len(inputs) and all(
        (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype)
        or (not isinstance(a, torch.Tensor) and a == b) for a, b in zip(inputs, fresh))


def _copy_into(inputs: list, fresh: list) -> None:
    with trusted():
        for a, b in zip(inputs, fresh):
            if isinstance(a, torch.Tensor) and b is not a:
                _T.copy_(a, b)


def refill(inputs: list, problem: ModuleType, seed: int, device: str) -> None:
    """Write the inputs of another seed into the same tensors (same objects, same addresses): a result cached
    on identity or data_ptr goes stale. Where the problem's inputs change shape or arguments with the seed, the
    list holds that seed's new inputs instead: fresh either way, never the old values under a new label (a
    get_inputs made to misfit once switched fresh inputs off, and a cache passed). A get_inputs that raises
    fails the call like any other error in the process."""
    fresh = make_inputs(problem, seed, device, into=inputs)
    if _aliased(inputs, fresh):  # e.g. `x = rand(); return [x @ w, x]`: copying in order would clobber one
        fresh = make_inputs(problem, seed, device)
    if _fits(inputs, fresh):
        _copy_into(inputs, fresh)
    else:
        inputs[:] = fresh


def rep_seed(seed: int, rep: int) -> int:
    """The seed of timed call `rep`'s inputs, derived from the batch's secret timing seed: every call gets new
    values, and the comparer recomputes any timed call's expected outputs from its label alone."""
    return int.from_bytes(hashlib.blake2b(f"{seed}:{rep}".encode(), digest_size=4).digest(), "big") >> 1


class FreshInputs:
    """The fresh-input policy of timing (the `fresh` hook of timing.bench): before every call, outside the timed
    window, the values of that call's own seed are written into the input tensors (refill), so a result cached
    on identity, data_ptr or a few sampled values misses, and any timed call can be checked by its label. On CPU
    the caches are flushed before each fill (timing.cpu_flush_buffer), inside the same accounted time."""

    def __init__(self, inputs: list, problem: ModuleType, seed: int, device: str):
        self.inputs, self.problem, self.seed, self.device = inputs, problem, seed, device
        self.filled: int | None = None  # the rep whose values the inputs hold; None: the timing seed's own
        self.timed_fill_s = 0.0  # spent filling (and flushing) before timed reps: the parent's check of the loop's wall
        self.made = fingerprint(inputs)  # what the timing seed wrote: checked against without making them again
        self._scrub = timing.cpu_flush_buffer() if device == "cpu" else None  # the CUDA flush is in timing's loop

    def __call__(self, rep: int) -> None:
        """The timing loop's hook: on CPU the caches emptied first, then rep's values written; a timed rep's
        seconds counted."""
        start = time.perf_counter()
        if self._scrub is not None and rep >= 0:
            with trusted():
                _T.add_(self._scrub, 1)
        self.fill(rep)
        if rep >= 0:
            self.timed_fill_s += time.perf_counter() - start

    def fill(self, rep: int) -> None:
        """Rep's values written into the inputs, and nothing else: what the comparer does to recompute a timed
        call's expected outputs (no cache to empty there, no time to account)."""
        refill(self.inputs, self.problem, rep_seed(self.seed, rep), self.device)
        self.filled = rep

    def label(self) -> str:
        """What the inputs hold now, as the comparer names its expected outputs."""
        return "timing" if self.filled is None else f"{TIMED}{self.filled}"

    @staticmethod
    def policy() -> str:
        return ("fresh: new values before every call from a secret per-call seed, written into the same tensors "
                "(new tensors where the problem's shapes change with the seed)")

    def held(self) -> int:
        """The seed whose values the inputs hold."""
        return self.seed if self.filled is None else rep_seed(self.seed, self.filled)

    def changed(self) -> bool:
        """Whether the inputs no longer hold what was last written into them: the candidate wrote into them.
        Before any fill, against the fingerprint taken when they were made; after one, that fill's values are
        written again into the same tensors and fingerprinted there. A second set to compare with would put
        another copy of a multi-GB input beside the candidate's (2 x 17 GB for avg_pool_2d's seed on the H100).
        The inputs hold the last fill's values afterwards, as the label says."""
        now = fingerprint(self.inputs)
        if self.filled is None:
            return now != self.made
        refill(self.inputs, self.problem, self.held(), self.device)
        return now != fingerprint(self.inputs)
