"""The trusted comparer, in the reference child after its run: it keeps the problem's expected outputs on the
evaluation device and judges each candidate output handed to it, so outputs never cross the host on the normal path.

A candidate's outputs arrive as CUDA IPC handles (evaluator.child.ipc) or, on CPU, as the raw-bytes file the harness
wrote. Expected outputs stay resident up to a byte budget; the rest are recomputed from their seed when asked
for (a forward of the reference, which is cheaper than holding gigabytes per seed for the whole batch).
"""

from __future__ import annotations

import time
from types import ModuleType

import torch

from evaluator.child import audit_rules, ipc, timing, trials
from evaluator.child.cuda_fills import CudaFills
from evaluator.child.fills import Fills
from evaluator.child.correctness import Comparison, judge_outputs, layout, load_outputs
from evaluator.labels import TIMED, timed_rep
from evaluator.protocol import (COMPARER_OP, Audit, Audited, Block, Close, Compare, Compared, Fill, Forget, Release,
                                StopClock, TimeBlock)
from evaluator.timing_method import lattice_steps

class Expected:
    """The reference's outputs per label: resident while they fit in `budget` bytes, else recomputed. A timed
    call's label ("timed_<rep>") names inputs made from its own seed (trials.rep_seed of the timing seed):
    recomputed when asked for, described like the timing call's."""

    def __init__(self, model, problem: ModuleType, seeds: dict[str, int], device: str, budget: int):
        self.model, self.problem, self.seeds, self.device, self.budget = model, problem, seeds, device, budget
        self.resident: dict[str, list] = {}
        self.meta: dict[str, list[dict]] = {}
        self.held = 0
        self.timed: trials.FreshInputs | None = None  # the timer's inputs, refilled to recompute a timed call
        self.recompute_s = 0.0  # spent recomputing outputs that were not resident

    def keep(self, outputs: list, label: str) -> list[dict]:
        """The saver of the reference run: describe every output, keep it if it fits."""
        self.meta[label] = [trials.describe(o) for o in outputs]
        size = trials.nbytes(outputs)
        if self.held + size <= self.budget:
            self.resident[label] = [o.detach() if isinstance(o, torch.Tensor) else o for o in outputs]
            self.held += size
        return self.meta[label]

    def outputs(self, label: str) -> list:
        if label in self.resident:
            return self.resident[label]
        start = time.perf_counter()
        with torch.no_grad():
            outputs = trials.as_tensors(self.model(*self.inputs(label)))
        if self.device == "cuda":
            torch.cuda.synchronize()
        self.recompute_s += time.perf_counter() - start
        return outputs

    def inputs(self, label: str) -> list:
        """A label's inputs. A timed call's are written into the timer's own tensors (every timed block refills
        them anyway): a second set of a 16 GB input ran the comparer out of memory beside its candidate (benchmarks/giant_memory.py)."""
        rep = timed_rep(label)
        if rep is not None and self.timed is not None:
            self.timed.fill(rep)
            return self.timed.inputs
        return trials.make_inputs(self.problem, self.seed_of(label), self.device)

    def seed_of(self, label: str) -> int:
        """The seed of a call's inputs: a trial's or the verify call's own, a timed call's from the timing seed."""
        rep = timed_rep(label)
        return self.seeds[label] if rep is None else trials.rep_seed(self.seeds["timing"], rep)

    def others(self, label: str) -> list[str]:
        """What a mismatching output may be instead: every other call the reference ran, and for a timed call
        the call before it (a result that lags one call behind)."""
        rep = timed_rep(label)
        return [other for other in self.meta if other != label] + ([f"{TIMED}{rep - 1}"] if rep else [])


def _received(request: Compare, opened: ipc.Opened) -> list:
    """The candidate's tensors as the request describes them: IPC ranges on CUDA, the raw-bytes file on CPU."""
    metas = request.outputs
    if request.path is not None:
        return load_outputs(request.path, metas)
    got = []
    for meta in metas:
        described = layout(meta)
        if described is None:
            got.append(None)
            continue
        dtype, shape, nbytes = described
        if "ipc" not in meta:  # not on the GPU: the structural check names the device
            got.append(torch.empty(0, dtype=dtype))
            continue
        got.append(opened.open(meta["ipc"], nbytes, dtype.itemsize).view(dtype).view(shape) if nbytes else torch.empty(shape, dtype=dtype, device="cuda"))
    return got


def _unseen(meta: dict, t: torch.Tensor) -> tuple[list[int], list[int], torch.Tensor, bytes]:
    """The glimpse a timed call's output was handed over with, checked against the output's own shape (the
    steps must be the lattice the harness reads, the bytes as many as its elements): its starts and steps, that
    lattice of `t`, and the bytes the window read."""
    seen = meta.get("seen")
    if not isinstance(seen, dict):
        raise ValueError("a timed call's output came without what its timed window read of it")
    start, step, raw = seen.get("start"), seen.get("step"), bytes.fromhex(str(seen.get("bytes", "")))
    shape = tuple(t.shape)
    if not isinstance(start, list) or list(step or []) != list(lattice_steps(shape)) or len(start) != len(shape) \
            or not all(isinstance(a, int) and 0 <= a < b for a, b in zip(start, step)):
        raise ValueError(f"what the timed window read is described as {seen.get('start')} by {seen.get('step')}, not "
                         f"the harness's lattice of a {list(shape)} output")
    lattice = timing.lattice_of(t, start, step)
    if len(raw) != lattice.numel() * t.element_size():
        raise ValueError(f"what the timed window read holds {len(raw)} bytes, not its lattice's")
    return start, step, lattice, raw


def late(metas: list, got: list, device: str) -> str:
    """On a timed call's outputs: where the snapshot, taken after the timer stopped, differs from what the timed
    window read of them (timing.glimpse), or '' where it does not. A difference is work done after the timer
    (kernels queued between the end event and the snapshot, by a thread, a hook or a gc callback)."""
    for i, (meta, t) in enumerate(zip(metas, got)):
        if not isinstance(meta, dict) or meta.get("device") != device or t is None or not t.numel():
            continue
        start, step, lattice, raw = _unseen(meta, t)
        after = lattice.contiguous().reshape(-1).cpu()
        before = torch.frombuffer(bytearray(raw), dtype=t.dtype)
        differs = (before.view(torch.uint8) != after.view(torch.uint8)).nonzero()
        if len(differs):
            k = int(differs[0]) // t.element_size()
            where = [a + b * int(n) for a, b, n in zip(start, step, torch.unravel_index(torch.tensor(k), lattice.shape))]
            return (f"output {i} at {where} held {before[k].item()!r} when the timer stopped and {after[k].item()!r} "
                    "in the snapshot after it: its work was still being done after the timer stopped")
    return ""


class Timer:
    """The reference's side of interleaved timing: its call on the timing inputs, refilled per rep as the
    candidate's are (trials.FreshInputs), kept from the reference's own timing. On CPU, after each call its
    outputs are copied and the copies held, with what the window read of them, to the block's end, as the
    candidate's harness holds a round's snapshots and glimpses until the parent has chosen among them: both
    sides' loops then cost alike beside the samples (the parent's wall-clock check reads the reference's), and
    both keep the same memory live while their calls run. With a core hogged (tests/test_pacing.py), an
    identical candidate timed 0.865-0.887x its reference while only its side held its snapshots, 0.86-0.96x
    (mean 0.91, 6 runs) while only its side held its glimpses, 0.96-0.99x (mean 0.98) with both held alike."""

    def __init__(self, call, fresh: trials.FreshInputs, device: str):
        self.call, self.fresh, self.device = call, fresh, device
        self.flush = timing.flush_buffer(device)  # made once: the comparer's footprint counts it
        self.held: list[list] = []

    def _copy(self, _rep: int, _least: int, _checkpoint: bool, out, seen) -> None:
        if self.device == "cpu":  # a GPU's events time only the window: a copy after it would cost the batch alone
            self.held.append((trials.snapshot(trials.as_tensors(out)), seen))

    def time(self, request: TimeBlock) -> Block:
        try:
            with torch.no_grad():
                return Block(samples=timing.block(self.call, self.device, request.first, request.reps, self.flush,
                                                  self.fresh, on_rep=self._copy))
        finally:
            self.held.clear()


class Comparer:
    """Answers `compare`, `audit` and (with a timer) `time` requests against one problem's reference; with `fills`,
    the forward exchanges' `fill` (evaluator.child.fills; on CUDA also `ring`, evaluator.child.cuda_fills)."""

    def __init__(self, expected: Expected, atol: float, rtol: float, timer: Timer | None = None,
                 fills: Fills | CudaFills | None = None):
        self.expected, self.atol, self.rtol, self.timer, self.fills = expected, atol, rtol, timer, fills

    def fill(self, request: Fill) -> None:
        self.fills.fill(request.name, request.label, request.seq)

    def _against(self, got: list, got_meta: list[dict], label: str, trial: int) -> Comparison:
        exp = self.expected
        expected = exp.outputs(label)  # described as they are: a timed call's shapes may differ from the timing call's
        return judge_outputs(trial, expected, [trials.describe(o) for o in expected], got, got_meta, self.atol,
                             self.rtol, exp.device)

    def compare(self, request: Compare) -> Compared:
        """One handed-over call: its comparison with the expected label, and on a mismatch the other label it
        matches instead (a cached or leftover result), if any."""
        opened, got = ipc.Opened(), []
        try:
            got = self.fills.take(request.kept, request.label) if request.kept and self.fills else _received(request, opened)
            if timed_rep(request.expected) is not None and (moved := late(request.outputs, got, self.expected.device)):
                return Compared(which=request.label, late=moved)
            result = self._against(got, request.outputs, request.expected, request.trial)
            stale = ""
            if result.mismatch is not None:
                stale = next((other for other in self.expected.others(request.expected)
                              if not self._against(got, request.outputs, other, -1).mismatch), "")
        except torch.OutOfMemoryError as exc:  # kforge's side: the expected outputs did not fit beside the candidate
            return Compared(which=request.label, error=f"the comparer ran out of memory: {str(exc)[:300]}", own_failure=True)
        except (OSError, ValueError, KeyError, TypeError, ipc.IpcError, RuntimeError) as exc:
            return Compared(which=request.label, error=f"{type(exc).__name__}: {str(exc)[:300]}")
        finally:
            del got
            opened.close()
        return Compared(which=request.label, mismatch=result.mismatch.model_dump() if result.mismatch else None,
                        max_abs_err=result.max_abs_err, tolerance_used=result.tolerance_used, stale=stale)

    def audit(self) -> list[dict]:
        """Every trivial answer against this problem's check (see evaluator.child.audit_rules)."""
        exp = self.expected
        return audit_rules.judge_trivials(list(exp.meta), exp.outputs, exp.inputs, self.atol, self.rtol)


def serve(chan, requests, comparer: Comparer) -> None:
    """Answer requests (evaluator.protocol.ComparerOp lines) until `close` or the end of the pipe."""
    for line in requests:
        request = COMPARER_OP.validate_json(line)
        if isinstance(request, Close):
            return
        if isinstance(request, Compare):
            start, comparer.expected.recompute_s = time.perf_counter(), 0.0
            answer = comparer.compare(request)
            answer.work_s, answer.recompute_s = time.perf_counter() - start, comparer.expected.recompute_s
            chan.send(answer)
        elif isinstance(request, Audit):
            chan.send(Audited(findings=comparer.audit()))
        elif isinstance(request, Fill) and comparer.fills:
            comparer.fill(request)
        elif isinstance(request, StopClock) and isinstance(comparer.fills, CudaFills):
            chan.send(comparer.fills.stop_clock(request))
        elif isinstance(request, Release) and isinstance(comparer.fills, CudaFills):
            comparer.fills.release(request.name, request.seq)
        elif isinstance(request, Forget) and isinstance(comparer.fills, CudaFills):
            comparer.fills.forget(request.name)
        elif isinstance(request, TimeBlock):
            chan.send(comparer.timer.time(request) if comparer.timer else Block(error="the reference was not timed"))
