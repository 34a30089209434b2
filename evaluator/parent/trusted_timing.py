"""Timing by trusted code: the parent rings each call of the candidate's forward server and of the problem's
reference (evaluator.child.forward_server), the comparer makes each call's inputs from seeds only it has, and
the outputs are read by trusted code, a lattice of them when the call ends, the whole of those the parent draws
for comparison. On CPU the parent holds the clock and reads the server's memory itself (evaluator.child.fills);
on CUDA the clock is the comparer's own stream, held until the server has queued the call, and the comparer
reads the outputs through IPC, stream-ordered behind the call (evaluator.child.cuda_fills).

What the candidate's process can do to its numbers is only its call: it never holds a seed or a future input,
never sees the clock, the choice of checked calls or the read positions, and nothing it sends is a measurement.
A call whose work is left for after `done` misses the glimpse taken then; a call done early from a thread sees
inputs not yet written. Both sides go through the same steps (the reference served by a child of its own, its
inputs filled by the comparer as the candidate's are), rounds interleaved by a secret coin, the candidate frozen
while the reference runs (evaluator.verdict.pacing)."""

from __future__ import annotations

import os
import random
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from evaluator import exchange
from evaluator.labels import TIMED
from evaluator.parent import server_reads as reads
from evaluator.parent.server_reads import Stalled
from evaluator.protocol import Arm, Fill, Forget, Release, StopClock, Timing
from evaluator.sandbox import memory
from evaluator.sandbox.cgroups import FreezeIncomplete
from evaluator.timing_method import ROUND
from evaluator.verdict.checks import CHECKED
from evaluator.verdict.pacing import Paired

_PAIRS, _LEAST = 10, 20  # rounds the budget must hold at least; reps before the interval may stop them
_ESTIMATE_MS = 100.0
_EMPTIES = 7  # CUDA: empty calls whose median window is the steps' own cost
_LEAST_MS = 1e-4  # a sample less the steps' cost is at least this (a clock's resolution)
# CUDA: a server's host time for queueing one call past which its head is let run (it waits for the GPU). A call
# that takes longer to queue is long: the host's round trip then in its window (~0.1 ms) is under 0.2 % of it.
PATIENCE_S = 0.05
POLICY = ("fresh: new values before every call from a per-call seed only the comparer holds, written into memory "
          "the candidate maps read-only; clocked, and its outputs read, by kforge's own process")
RELEASED = ("; a forward waited for the GPU (a synchronize, or more launches than a stream's queue takes), so both "
            "sides' calls ran as they were queued: their host's time and kforge's round trip (~0.1 ms) lie in every window")


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


@dataclass
class Timed:
    """What trusted timing leaves for the judge: the candidate's samples, both sides' blocks, the calls drawn
    for comparison and their snapshots (label -> (metas with what the glimpse read, file or None)."""

    timing: Timing | None = None
    paired: Paired = field(default_factory=Paired)
    asked: list[str] = field(default_factory=list)
    snapshots: dict[str, tuple[list[dict], Path | None]] = field(default_factory=dict)  # None: the comparer kept it
    failed: str = ""


REFERENCE = "reference"  # the suffix of the exchange of a candidate's reference server: NAME-reference


class TrustedTiming:
    """Times one candidate beside its problem's reference. `comparer`, `candidate` and `reference` are their
    Children (the reference's: its forward server); `folder` the comparer's exchange folder, `name` the
    candidate's exchange there (its reference's: NAME-reference); `settings` the batch's EvalSettings."""

    def __init__(self, comparer, candidate, reference, folder: Path, name: str, settings, rep_ms: float,
                 cores: set[int] | None):
        deadline = candidate.deadline()
        self.comparer, self.candidate, self.reference, self.folder, self.name = comparer, candidate, reference, folder, name
        self.settings, self.rep_ms, self.cores = settings, rep_ms, cores
        alive = lambda: all(c.proc.poll() is None for c in (comparer, candidate, reference))  # noqa: E731
        self.names = {"candidate": name, REFERENCE: f"{name}-{REFERENCE}"}
        self.rings = {side: reads.Ring(child, exchange.inputs_path(folder, self.names[side]), alive, deadline)
                      for side, child in (("candidate", candidate), (REFERENCE, reference))}
        self.fenced = False  # the comparer holds the timing core while it fills (realtime), else each server is frozen
        self.coin = random.SystemRandom()
        self.plans: dict[tuple[int, int], reads.Plan] = {}  # (pid, output) -> where the next glimpse reads
        self.last_kept: tuple[str, list[dict]] | None = None  # CUDA: a round's last call, kept by the comparer
        self.steps_ms = 0.0  # CUDA: an empty call's window, taken off every call's (measured in _warm)
        self.released = False  # CUDA: a call could not be queued held, so every later call of both sides runs unheld
        self.done = Timed()
        self._call = self._cuda_call if settings.device == "cuda" else self._cpu_call

    def _cpu_call(self, side: str, label: str, keep: str = "") -> tuple[float, list[exchange.Output], list]:
        """One call of either side, through the same steps: the server is armed, the comparer fills its inputs and
        says go, the clock runs from the moment this process sees `go` to the moment it sees `done`, and the
        outputs are glimpsed then (and read whole where the call was drawn). Nothing of the server runs from the
        fill's first byte to `go` (the comparer holds the core, or the server is frozen until the clock runs), so
        no work starts on inputs before it."""
        ring = self._arm(side)
        with nullcontext() if self.fenced else ring.child.paused():
            self.comparer.send(Fill(name=self.names[side], label=label, seq=ring.seq))
            ring.wait(ring.went, ring.seq)
            start = time.perf_counter()
        ring.wait(ring.done.get, ring.seq)
        ms = (time.perf_counter() - start) * 1e3
        outputs = ring.outputs()
        seen = [None if plan is None else reads.seen_at(ring.pid, out, plan)
                for out, plan in zip(outputs, self._plans(ring.pid, outputs))]
        if keep == "drawn":
            self._keep(label, outputs, seen)
        return ms, outputs, seen

    def _cuda_call(self, side: str, label: str, keep: str = "", empty: bool = False) -> tuple[float, list[exchange.Output], list]:
        """One call on CUDA: the server is armed, the comparer queues the call's held head (its inputs, start,
        `go`) and says go; once the server has queued its call behind `go` and said done, the comparer queues the
        tail (`done`, the lattice reads at places drawn here, end, a snapshot where asked) and lets the stream
        run. Host time of neither process lies in the window (evaluator.child.cuda_fills); what the steps cost
        themselves (the GPU's switches between the comparer's context and the server's: an empty call's window)
        is taken off, as on both sides alike."""
        ring, name = self._arm(side, empty), self.names[side]
        self.comparer.send(Fill(name=name, label=label, seq=ring.seq))
        try:
            held = empty or not self.released  # an empty call is the steps' own cost: always held
            if not held or not ring.wait(ring.done.get, ring.seq, PATIENCE_S):
                self.comparer.send(Release(name=name, seq=ring.seq))
                self.released = True
            ring.wait(ring.done.get, ring.seq)
            outputs = ring.outputs()
        except (Stalled, memory.Unreadable, ValueError):
            self.comparer.send(StopClock(name=name, seq=ring.seq, abort=True))
            raise
        plans = self._plans(ring.pid, outputs)
        since = len(self.comparer.result.messages)
        self.comparer.send(StopClock(name=name, seq=ring.seq, label=label, outputs=[reads.place_of(o) for o in outputs],
                                     starts=[None if p is None else p.start for p in plans], keep=keep,
                                     within_s=max(1.0, ring.deadline - time.monotonic())))
        clocked = self.comparer.wait_for("clocked", since, timeout_s=max(1.0, ring.deadline - time.monotonic()))
        if clocked is None or clocked.get("error"):
            raise Stalled(f"call {label} was not clocked: {clocked.get('error') if clocked else 'the comparer did not answer'}")
        seen = clocked["seen"]
        metas = [reads.meta_of(o, "cuda") | ({"seen": s} if s else {}) for o, s in zip(outputs, seen)]
        if keep == "drawn":
            self.done.snapshots[label] = (metas, None)
        elif keep == "last":
            self.last_kept = (label, metas)
        return max(float(clocked["ms"]) - self.steps_ms, _LEAST_MS), outputs, seen

    def _arm(self, side: str, empty: bool = False) -> reads.Ring:
        ring = self.rings[side]
        ring.seq += 1
        ring.child.send(Arm(arm=ring.seq, empty=empty))
        ring.wait(ring.armed.get, ring.seq)
        return ring

    def _plans(self, pid: int, outputs: list[exchange.Output]) -> list[reads.Plan | None]:
        """Where this call's glimpse of each output reads (drawn at the call before, never told to the server);
        the next call's drawn now."""
        plans = []
        for i, out in enumerate(outputs):
            if out[1] is None or not out.nbytes_span:
                plans.append(None)
                continue
            plan = self.plans.get((pid, i))
            if plan is None or plan.key != tuple(out[1:]):
                plan = reads.plan_of(out[1], out[2], out[3], self.coin)
            plans.append(plan)
            self.plans[(pid, i)] = reads.plan_of(out[1], out[2], out[3], self.coin)
        return plans

    def _reference_call(self, label: str, least: int = 1, rep: int = 0) -> float:
        """One call of the reference, its outputs read as a candidate's are (a glimpse at done, the whole at the
        same odds on CPU), so both sides' memory is touched alike by trusted code between calls."""
        ms, outputs, _ = self._call(REFERENCE, label)
        if self.settings.device == "cpu" and self.coin.random() < CHECKED / max(least, rep + 1):
            reads.snapshot(self.rings[REFERENCE].pid, outputs)
        return ms

    def _keep(self, label: str, outputs: list[exchange.Output], seen: list) -> None:
        """CPU: the whole of a call's outputs, read now and written for the comparer, with what the glimpse read."""
        path = self.folder / f"{self.name}-{label}.out"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, reads.snapshot(self.rings["candidate"].pid, outputs))
        finally:
            os.close(fd)
        metas = [reads.meta_of(o) | ({"seen": s} if s else {}) for o, s in zip(outputs, seen)]
        self.done.snapshots[label] = (metas, path)

    def _keep_last(self, label: str, outputs: list[exchange.Output], seen: list) -> None:
        """The last timed call is always compared: on CPU read now (the server keeps it until its next call), on
        CUDA the comparer's snapshot of it, taken as its round ended."""
        if self.settings.device == "cpu":
            self._keep(label, outputs, seen)
        elif self.last_kept is not None and self.last_kept[0] == label:
            self.done.snapshots[label] = (self.last_kept[1], None)

    def _estimate(self) -> tuple[float, int]:
        """One call's cost by the parent's clock around the whole cycle (fill, ring, read), and the calls made."""
        costs, calls = [], 0
        while len(costs) < 5 and (len(costs) < 2 or sum(costs) < _ESTIMATE_MS):
            calls += 1
            start = time.perf_counter()
            self._call("candidate", f"{TIMED}{-calls}")
            costs.append((time.perf_counter() - start) * 1e3)
        costs.sort()
        return max(costs[len(costs) // 2], 1e-3), calls

    def _warm(self) -> int:
        """The candidate's estimate and warm-up calls, then as many of the reference's: both servers come to their
        first timed call after the same number of calls through their exchanges."""
        estimate, calls = self._estimate()
        warm = max(0, int((self.settings.warmup_ms - estimate * calls) / estimate))
        for k in range(warm):
            self._call("candidate", f"{TIMED}{-(calls + k + 1)}")
        for k in range(calls + warm):
            self._reference_call(f"{TIMED}{-(k + 1)}")
        if self.settings.device == "cuda":  # the steps' own cost, through the reference's (trusted) server
            empties = sorted(self._call(REFERENCE, f"{TIMED}-1", "", True)[0] for _ in range(_EMPTIES))
            self.steps_ms = empties[len(empties) // 2]
        self.estimate = estimate
        return calls + warm

    def _round(self, first: int, n: int, least: int) -> list[float]:
        """n timed calls; which are compared is drawn here before each call, never known to the server."""
        samples = []
        for k in range(first, first + n):
            drawn = self.coin.random() < CHECKED / max(least, k + 1)
            keep = "drawn" if drawn else "last" if k == first + n - 1 else ""
            ms, outputs, seen = self._call("candidate", f"{TIMED}{k}", keep)
            samples.append(ms)
            if drawn:
                self.done.asked.append(f"{TIMED}{k}")
            self.last = (k, outputs, seen)
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
        cpu = self.settings.device == "cpu"
        mine, policy = (os.sched_getaffinity(0), realtime()) if cpu else (None, None)
        filler = memory.server_pid(self.comparer.proc.pid)
        fills = realtime(filler) if cpu else None
        self.fenced = fills is not None
        if cpu:
            os.sched_setaffinity(0, self.cores)  # this thread spins: never on the core the calls run on
        try:
            self._rounds(hold)
            self._call("candidate", "verify", "drawn")
        except (Stalled, memory.Unreadable, ValueError, FreezeIncomplete) as exc:
            self.done.failed = str(exc)
        finally:
            if cpu:
                os.sched_setaffinity(0, mine)
                _restore(0, policy)
                _restore(filler, fills)
            for child in (self.candidate, self.reference):
                child.send(Arm(end=True))
        return self.done

    def forget(self) -> None:
        """Once its kept calls were compared: the comparer lets go of both exchanges' device buffers (CUDA)."""
        if self.settings.device == "cuda":
            for name in self.names.values():
                self.comparer.send(Forget(name=name))

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
            self._keep_last(f"{TIMED}{k}", outputs, seen)
        self.done.timing = Timing(which="model", samples=samples, untimed_calls=untimed,
                                  fresh_inputs=POLICY + (RELEASED if self.released else ""), steps_ms=self.steps_ms)

