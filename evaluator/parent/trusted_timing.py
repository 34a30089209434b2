"""Timing by trusted code (CPU): the parent rings each call of the candidate's forward server and of the problem's
reference (evaluator.child.forward_server) and holds the clock, the comparer makes each call's inputs from seeds
only it has (evaluator.child.fills), and the parent reads each call's outputs from the server's memory itself, a
lattice of them at once when `done` is seen, the whole of those it draws for comparison after the call.

What the candidate's process can do to its numbers is only its call: it never holds a seed or a future input,
never sees the clock, the choice of checked calls or the read positions, and nothing it sends is a measurement.
A call whose work is left for after `done` misses the glimpse taken then; a call done early from a thread sees
inputs not yet written. Both sides go through the same steps (the reference served by a child of its own, its
inputs filled by the comparer as the candidate's are), rounds interleaved by a secret coin, the candidate frozen
while the reference runs (evaluator.verdict.pacing)."""

from __future__ import annotations

import ctypes
import os
import random
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch

from evaluator import exchange
from evaluator.child.timing import ROUND, lattice_steps
from evaluator.child.trials import TIMED
from evaluator.protocol import Arm, Fill, Timing
from evaluator.sandbox import memory
from evaluator.sandbox.cgroups import FreezeIncomplete
from evaluator.verdict.checks import CHECKED
from evaluator.verdict.pacing import Paired

_PAIRS, _LEAST = 10, 20  # rounds the budget must hold at least; reps before the interval may stop them
_ESTIMATE_MS = 100.0
_POLL = 1 << 12  # spins between looks at the clock and at the server's life
POLICY = ("fresh: new values before every call from a per-call seed only the comparer holds, written into memory "
          "the candidate maps read-only; clocked, and its outputs read, by kforge's own process")


def realtime(pid: int = 0) -> tuple[int, os.sched_param] | None:
    """Thread `pid` (0: this one) made a real-time one, where kforge may (root); the policy it had, or None. This
    thread, while it holds the clock: its spin on `done` is then never preempted by the machine's other work,
    whose delays would land inside the window it measures (the kernel's real-time throttling leaves the rest of
    its core 5 %). The comparer, while it fills: no server's thread runs on the timing core until it said go."""
    try:
        before = (os.sched_getscheduler(pid), os.sched_getparam(pid))
        os.sched_setscheduler(pid, os.SCHED_FIFO, os.sched_param(1))
    except OSError:  # not root, or the comparer is gone (its next fill says so)
        return None
    return before


def _restore(pid: int, policy: tuple[int, os.sched_param] | None) -> None:
    if policy is not None:
        try:
            os.sched_setscheduler(pid, *policy)
        except OSError:
            pass  # the comparer is gone


class Stalled(Exception):
    """A server did not answer in time, or is gone: its child's own end says why."""


@dataclass
class _Plan:
    """Where a glimpse of one output will read: its lattice's starts (drawn by the parent), steps and offsets."""

    key: tuple
    start: list[int]
    step: tuple[int, ...]
    offsets: torch.Tensor  # bytes from the output's first element, in the lattice's order


def _plan(dtype: str, shape: tuple, strides: tuple, coin: random.SystemRandom) -> _Plan:
    step = lattice_steps(tuple(shape))
    start = [coin.randrange(s) for s in step]
    item = exchange.ITEMSIZE[dtype]
    offsets = torch.zeros((), dtype=torch.int64)
    for a, b, n, s in zip(start, step, shape, strides):
        axis = (a + torch.arange(-((a - n) // b), dtype=torch.int64) * b) * s * item
        offsets = offsets.unsqueeze(-1) + axis
    return _Plan((dtype, tuple(shape), tuple(strides)), start, step, offsets.reshape(-1))


def _seen(pid: int, out: exchange.Output, plan: _Plan) -> dict:
    """The lattice's bytes of one output, read now from the server's memory (one call, up to IOV_MAX pieces each)."""
    item, count = exchange.ITEMSIZE[out[1]], plan.offsets.numel()
    remote = (memory.Iovec * count)()
    table = torch.frombuffer(remote, dtype=torch.int64).view(count, 2)
    table[:, 0] = plan.offsets + out[0]
    table[:, 1] = item
    got = bytearray(count * item)
    if count and memory.read_pieces(pid, remote, count, ctypes.addressof((ctypes.c_char * len(got)).from_buffer(got))) != len(got):
        raise memory.Unreadable(0, "part of an output's glimpse could not be read")
    return {"start": plan.start, "step": list(plan.step), "bytes": got.hex()}


def _meta(out: exchange.Output) -> dict:
    if out[1] is None:
        return {"type": "not a plain CPU tensor", "exact_tensor": False}
    return {"type": "Tensor", "exact_tensor": True, "shape": list(out[2]), "dtype": f"torch.{out[1]}", "device": "cpu"}


def _snapshot(pid: int, outputs: list[exchange.Output]) -> bytes:
    """The plain outputs' elements, read from the server's memory, as contiguous raw bytes back to back."""
    parts = []
    for out in outputs:
        ptr, dtype, shape, strides = out
        if dtype is None or not out.nbytes_span:
            continue
        raw = memory.read_range(pid, ptr, out.nbytes_span)
        flat = torch.frombuffer(raw, dtype=getattr(torch, dtype))
        dense = flat.as_strided(shape, strides).contiguous()
        parts.append(ctypes.string_at(dense.data_ptr(), dense.numel() * dense.element_size()))
    return b"".join(parts)


REFERENCE = "reference"  # the suffix of the exchange of a candidate's reference server: NAME-reference


class _Ring:
    """One forward server as the parent rings it: its control page in its memory, its inputs file's `go`."""

    def __init__(self, child, inputs: Path, alive, deadline: float):
        control = int(child.result.last("serving")["control"])
        self.child, self.pid, self.control = child, memory.server_pid(child.proc.pid), control
        self.armed, self.done = memory.Word(self.pid, control + exchange.ARMED), memory.Word(self.pid, control + exchange.DONE)
        self.inputs, self.alive, self.deadline, self.seq = exchange.map_file(inputs, writable=False), alive, deadline, 0

    def wait(self, look, seq: int) -> None:
        spins = 0
        while look() != seq:
            spins += 1
            if spins % _POLL == 0 and (time.monotonic() > self.deadline or not self.alive()):
                raise Stalled(f"the forward server did not answer call {seq}")

    def went(self) -> int:
        return exchange.word(self.inputs, exchange.GO)

    def outputs(self) -> list[exchange.Output]:
        return exchange.read_outputs(memory.read_range(self.pid, self.control, exchange.CTL_BYTES))


@dataclass
class Timed:
    """What trusted timing leaves for the judge: the candidate's samples, both sides' blocks, the calls drawn
    for comparison and their snapshots (label -> (metas with what the glimpse read, file))."""

    timing: Timing | None = None
    paired: Paired = field(default_factory=Paired)
    asked: list[str] = field(default_factory=list)
    snapshots: dict[str, tuple[list[dict], Path]] = field(default_factory=dict)
    failed: str = ""


class TrustedTiming:
    """Times one candidate beside its problem's reference. `comparer`, `candidate` and `reference` are their
    Children (the reference's: its forward server); `folder` the comparer's exchange folder, `name` the
    candidate's exchange there (its reference's: NAME-reference); `settings` the batch's EvalSettings."""

    def __init__(self, comparer, candidate, reference, folder: Path, name: str, settings, rep_ms: float,
                 cores: set[int]):
        deadline = candidate.result.started + candidate.limits.timeout_s
        self.comparer, self.candidate, self.reference, self.folder, self.name = comparer, candidate, reference, folder, name
        self.settings, self.rep_ms, self.cores = settings, rep_ms, cores
        alive = lambda: all(c.proc.poll() is None for c in (comparer, candidate, reference))  # noqa: E731
        self.names = {"candidate": name, REFERENCE: f"{name}-{REFERENCE}"}
        self.rings = {side: _Ring(child, exchange.inputs_path(folder, self.names[side]), alive, deadline)
                      for side, child in (("candidate", candidate), (REFERENCE, reference))}
        self.fenced = False  # the comparer holds the timing core while it fills (realtime), else each server is frozen
        self.coin = random.SystemRandom()
        self.plans: dict[tuple[int, int], _Plan] = {}  # (pid, output) -> where the next glimpse reads
        self.done = Timed()

    def _call(self, side: str, label: str) -> tuple[float, list[exchange.Output], list]:
        """One call of either side, through the same steps: the server is armed, the comparer fills its inputs and
        says go, the clock runs from the moment this process sees `go` to the moment it sees `done`, and the
        outputs are glimpsed then. Nothing of the server runs from the fill's first byte to `go` (the comparer
        holds the core, or the server is frozen until the clock runs), so no work starts on inputs before it."""
        ring = self.rings[side]
        ring.seq += 1
        ring.child.send(Arm(arm=ring.seq))
        ring.wait(ring.armed.get, ring.seq)
        with nullcontext() if self.fenced else ring.child.paused():
            self.comparer.send(Fill(name=self.names[side], label=label, seq=ring.seq))
            ring.wait(ring.went, ring.seq)
            start = time.perf_counter()
        ring.wait(ring.done.get, ring.seq)
        ms = (time.perf_counter() - start) * 1e3
        outputs = ring.outputs()
        return ms, outputs, self._glimpse(ring.pid, outputs)

    def _candidate_call(self, label: str) -> tuple[float, list[exchange.Output], list]:
        return self._call("candidate", label)

    def _glimpse(self, pid: int, outputs: list[exchange.Output]) -> list:
        seen = []
        for i, out in enumerate(outputs):
            if out[1] is None or not out.nbytes_span:
                seen.append(None)
                continue
            plan = self.plans.get((pid, i))
            if plan is None or plan.key != tuple(out[1:]):
                plan = _plan(out[1], out[2], out[3], self.coin)
            seen.append(_seen(pid, out, plan))
            self.plans[(pid, i)] = _plan(out[1], out[2], out[3], self.coin)  # the next call's, drawn now
        return seen

    def _reference_call(self, label: str, least: int = 1, rep: int = 0) -> float:
        """One call of the reference, its outputs read as a candidate's are (a glimpse at done, the whole at the
        same odds), so both sides' memory is touched alike by this process between calls."""
        ms, outputs, _ = self._call(REFERENCE, label)
        if self.coin.random() < CHECKED / max(least, rep + 1):
            _snapshot(self.rings[REFERENCE].pid, outputs)
        return ms

    def _keep(self, label: str, outputs: list[exchange.Output], seen: list) -> None:
        """The whole of a call's outputs, read now and written for the comparer, with what the glimpse read."""
        path = self.folder / f"{self.name}-{label}.out"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, _snapshot(self.rings["candidate"].pid, outputs))
        finally:
            os.close(fd)
        metas = [_meta(o) | ({"seen": s} if s else {}) for o, s in zip(outputs, seen)]
        self.done.snapshots[label] = (metas, path)

    def _estimate(self) -> tuple[float, int]:
        """One call's cost by the parent's clock around the whole cycle (fill, ring, read), and the calls made."""
        costs, calls = [], 0
        while len(costs) < 5 and (len(costs) < 2 or sum(costs) < _ESTIMATE_MS):
            calls += 1
            start = time.perf_counter()
            self._candidate_call(f"{TIMED}{-calls}")
            costs.append((time.perf_counter() - start) * 1e3)
        costs.sort()
        return max(costs[len(costs) // 2], 1e-3), calls

    def _warm(self) -> int:
        """The candidate's estimate and warm-up calls, then as many of the reference's: both servers come to their
        first timed call after the same number of calls through their exchanges."""
        estimate, calls = self._estimate()
        warm = max(0, int((self.settings.warmup_ms - estimate * calls) / estimate))
        for k in range(warm):
            self._candidate_call(f"{TIMED}{-(calls + k + 1)}")
        for k in range(calls + warm):
            self._reference_call(f"{TIMED}{-(k + 1)}")
        self.estimate = estimate
        return calls + warm

    def _round(self, first: int, n: int, least: int) -> list[float]:
        samples, last = [], None
        for k in range(first, first + n):
            ms, outputs, seen = self._candidate_call(f"{TIMED}{k}")
            samples.append(ms)
            if self.coin.random() < CHECKED / max(least, k + 1):
                self.done.asked.append(f"{TIMED}{k}")
                self._keep(f"{TIMED}{k}", outputs, seen)
            last = (k, outputs, seen)
        self.last = last
        return samples

    def _reference_block(self, first: int, n: int, least: int, hold) -> None:
        paired = self.done.paired
        try:
            with hold():
                start = time.monotonic()
                block = [self._reference_call(f"{TIMED}{k}", least, k) for k in range(first, first + n)]
                paired.reference_wall_s += time.monotonic() - start
                paired.paused_s = paired.reference_wall_s  # the candidate stood frozen meanwhile
        except FreezeIncomplete as exc:
            paired.void.append(first)
            paired.unfrozen = paired.unfrozen or str(exc)
            return
        paired.reference.append(block)

    def run(self, hold) -> Timed:
        """Warm-up, interleaved rounds until the paired ratio's interval is tight or the budget is spent, then
        the verify call; the candidate's server is told to end either way."""
        mine, policy = os.sched_getaffinity(0), realtime()
        filler = memory.server_pid(self.comparer.proc.pid)
        fills = realtime(filler)
        self.fenced = fills is not None
        os.sched_setaffinity(0, self.cores)  # this thread spins: never on the core the calls run on
        try:
            self._rounds(hold)
            ms, outputs, seen = self._candidate_call("verify")
            self._keep("verify", outputs, seen)
        except (Stalled, memory.Unreadable, ValueError, FreezeIncomplete) as exc:
            self.done.failed = str(exc)
        finally:
            os.sched_setaffinity(0, mine)
            _restore(0, policy)
            _restore(filler, fills)
            for child in (self.candidate, self.reference):
                child.send(Arm(end=True))
        return self.done

    def _rounds(self, hold) -> None:
        s, paired = self.settings, self.done.paired
        untimed = self._warm()
        most = min(s.max_reps, max(s.min_reps, int(self.rep_ms / self.estimate)))
        size, least = max(1, min(ROUND, most // _PAIRS)), min(most, max(s.min_reps, _LEAST))
        samples: list[float] = []
        began = time.monotonic()
        while len(samples) < most:
            first, n = len(samples), min(size, most - len(samples))
            before = self.coin.random() < 0.5
            if before:
                self._reference_block(first, n, least, hold)
            block = self._round(first, n, least)
            if not before:
                self._reference_block(first, n, least, hold)
            paired.candidate.append(block)
            samples += block
            if len(samples) >= least and paired.settled(s.rel_ci):
                break
            if (time.monotonic() - began) * 1e3 > 4 * self.rep_ms + 1000:
                break
        k, outputs, seen = self.last
        if f"{TIMED}{k}" not in self.done.snapshots:  # the last call is compared too
            self.done.asked.append(f"{TIMED}{k}")
            self._keep(f"{TIMED}{k}", outputs, seen)
        self.done.timing = Timing(which="model", samples=samples, untimed_calls=untimed, fresh_inputs=POLICY)

