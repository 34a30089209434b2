"""The parent's side of each problem's reference: one trusted child per open problem runs the problem's Model on
every seed of the batch, times it, and then stays as the comparer of that problem's candidate outputs
(evaluator.child.comparer), holding the expected outputs on the device. A problem opens when its first compiled
candidate is about to run and closes when its last candidate is judged; how many are open at once is bounded by
the memory their outputs take (OpenProblems), so memory does not grow with the batch.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from pydantic import BaseModel

from evaluator.parent.batch import Batch
from evaluator.contracts import EvalSettings, EvaluatorError
from evaluator.hardware import device_memory
from evaluator.verdict.case import Reference, timings
from evaluator.verdict.rules import ended_badly
from evaluator.protocol import Close, Compare, Go, TimeBlock
from evaluator.sandbox.spawn import Child
from reference_problems import Problem


_RESIDENT_SHARE = 0.15  # of device memory: expected outputs one problem keeps resident (the rest are recomputed)
_OPEN_SHARE = 0.35  # of device memory: every open problem's comparer together
_OPEN_PER_DEVICE = 4  # processes too: each CUDA process costs ~1 GB of host memory, whatever it holds
_SPARES_PER_DEVICE = 2  # reference children started ahead of their problem's turn: no device memory until asked
RUN_BASE_S, RUN_FACTOR = 20.0, 10.0  # a candidate's run budget: 20 s plus 10 times its reference's own run
# Where a replacement comparer is started: a child's parent-death signal comes when the thread that started it ends,
# and the thread of a request that finds the comparer lost (a candidate's reader) ends with its candidate.
_LASTING = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kforge-replace")


Join = Callable[[str | None, int], tuple[str | None, bool]]  # (GPU, bytes it will hold) -> (GPU, beside another?)
_log = logging.getLogger(__name__)


class ReferenceFailed(Exception):
    """The problem's reference could not run: its candidates get `reference_error` with this cause."""


def run_budget_s(settings: EvalSettings, ref: Reference) -> float:
    """A candidate's run budget (load, trials, leak check, timing, probe), capped by the limit: a hang is a timeout
    in about a minute on a small problem, not after the cap. It also bounds each of its requests to the comparer:
    no answer may take longer than the run that waits for it."""
    return min(settings.limits.timeout_s, RUN_BASE_S + RUN_FACTOR * ref.run_s)


def _cause(server: "ReferenceServer") -> str:
    """Why the reference child ended before it was ready, in words; never empty."""
    result = server.child.result
    timeout = server.batch.settings.limits.timeout_s
    outcome = ended_badly(result, timeout, 0)
    cause = outcome.evidence.cause if outcome else "it ended before reporting its outputs"
    if result.returncode == -signal.SIGKILL and not (result.timed_out or result.memory_exceeded or result.cancelled):
        cause += " (SIGKILL from outside kforge: most likely the kernel's OOM killer)"
    if result.memory_exceeded:
        cause += f" ({server.batch.settings.limits.memory_mb:,} MB host limit)"
    tail = result.log_tail(600).strip().splitlines()
    return f"reference of '{server.problem.name}' failed: {cause}" + (f"; log: {tail[-1][:200]}" if tail else "")


def _workdir(batch: Batch, problem: Problem, gpu: str | None, pair: int = 0) -> Path:
    return batch.root / "ref" / f"{problem.sha256[:16]}-{gpu}-{pair}"


def exchanges(batch: Batch, problem: Problem, gpu: str | None, pair: int = 0) -> Path:
    """The folder of the forward exchanges (evaluator.exchange) of the problem's comparer on `gpu` for `pair`: two
    per candidate it times beside, the candidate's and its reference's."""
    return _workdir(batch, problem, gpu, pair) / "exchange"


def _spawn(batch: Batch, problem: Problem, gpu: str | None, pair: int = 0) -> Child:
    workdir = _workdir(batch, problem, gpu, pair)
    return batch.spawn(workdir, workdir / "build", problem, gpu=gpu, clocks=True)


class ReferenceServer:
    """One problem's reference child. `prestart` spawns it early on CUDA (its interpreter and torch load while
    the device is busy); `ready` runs it on the problem's GPU (`gpu`, where OpenProblems placed it; None: the
    one the gate gives), and returns its Reference or raises ReferenceFailed. `pair`: which of a CPU candidate's
    fresh process pairs it times beside (Batch.pairs); 0 is also the problem's comparer for everything else.
    `room`: the device memory it is expected to hold, with which it may start beside comparers still closing
    there (Batch.settle); None: only once they are gone. It times its model only once they are gone. A comparer
    lost after it was ready (dead, or silent for a candidate's whole budget) is replaced on the same seeds, by the
    next request or the next candidate, whichever comes first (`lost` says why until then)."""

    def __init__(self, batch: Batch, problem: Problem, audit: bool = False, child: Child | None = None,
                 gpu: str | None = None, pair: int = 0, room: int | None = None):
        self.batch, self.problem, self.audit, self.room = batch, problem, audit, room
        self.workdir = _workdir(batch, problem, gpu, pair)
        self.child = child  # a spare started before the problem opened (OpenProblems.spare)
        self.gpu, self.pair = gpu, pair
        self.reference: Reference | None = None
        self.failure = ""
        self.lost = ""
        self.killers: set[Path] = set()  # out dirs of candidates whose file killed the comparer: not read again
        self._lock = threading.Lock()

    def prestart(self) -> None:
        """Spawn the child now: its interpreter and torch load while the device is busy (CUDA only: on CPU a
        start would slow the run being timed)."""
        with self._lock:
            if self.child is None:
                self.child = _spawn(self.batch, self.problem, self.gpu, self.pair)

    def ready(self, take: Callable[[str | None], str | None], join: Join | None = None,
              may_run: bool = True) -> Reference | None:
        """`take`: the device, held (the candidate's Hold); `join`: the device for the untimed part alone, perhaps
        beside another candidate's last stages (Hold.join): its outputs are made there, its model timed once
        `take` holds it. `may_run` False (a candidate sharing the device, evaluator.parent.sharing): None where
        the reference is still to run, which it must not do while it waits for the device holding this lock."""
        self.prestart()
        with self._lock:
            if not may_run and (self.lost or self.reference is None) and not self.failure:
                return None
            if self.lost and not self.failure:
                self._replace(take, join)
            elif self.reference is None and not self.failure:
                self._run(take, join)
            if self.failure:
                raise ReferenceFailed(self.failure)
            return self.reference

    def _run(self, take: Callable[[str | None], str | None], join: Join | None = None, timed: bool = True) -> None:
        """The reference child's run to `ready`; while it times its model, every candidate sharing the device is
        frozen (evaluator.parent.sharing), unless `timed` is False: a replacement's times are not kept, and it may
        run inside a sharer's own request."""
        batch = self.batch
        budget = int(_RESIDENT_SHARE * device_memory(batch.settings.device))
        folder = None
        if batch.trusted_timing():
            folder = exchanges(batch, self.problem, self.gpu, self.pair)
            folder.mkdir(parents=True, exist_ok=True)
        request = batch.request("reference", self.problem, self.workdir / "out", resident_bytes=budget, audit=self.audit,
                                exchange=str(folder) if folder else None)
        settled: list[float] = []
        joined: list[bool] = []
        resumes: list[Callable[[], None]] = []
        self.child.on_message = lambda message: self._quiet(take, settled, resumes if timed else None) \
            if message.get("event") == "quiet" else None
        self.child.begin(request, gate=lambda: self._pin(self._enter(take, join, joined)))
        ready = self.child.wait_for("ready")
        for resume in resumes:
            resume()
        if ready is None:
            self.close()
            if any(joined):  # it ran beside another candidate, whose doing its failure may be: once more, alone
                _log.info("the reference of '%s' failed beside another candidate (%s); running it alone",
                          self.problem.name, _cause(self))
                self.child = _spawn(batch, self.problem, self.gpu, self.pair)
                return self._run(take)
            self.failure = _cause(self)
            return
        result = self.child.result
        report = result.last("trials")["trials"]
        times = timings(result, batch.settings.device)
        self.reference = Reference(meta={label: entry["outputs"] for label, entry in report.items()}, trials=report,
                                   timing=times.get("model"), compiled=times.get("compiled"),
                                   footprint=int(ready.get("footprint", 0)), audit=ready.get("audit") or [],
                                   run_s=ready["_t"] - result.started - sum(settled),
                                   stage_s=result.stage_seconds(until=ready["_t"]))

    def _replace(self, take: Callable[[str | None], str | None], join: Join | None = None) -> None:
        """A fresh comparer in place of the lost one: the same request, so the same seeds and expected outputs.
        The problem's Reference stays the first run's (its timing and its candidates' budget): a replacement may
        run beside the candidate whose request found the comparer lost. One that fails is the problem's failure."""
        _log.warning("kforge's comparer for '%s' was lost (%s): a fresh one replaces it", self.problem.name, self.lost)
        kept, self.lost = self.reference, ""
        self.child = _LASTING.submit(_spawn, self.batch, self.problem, self.gpu, self.pair).result()
        self._run(take, join, timed=False)
        self.reference = kept

    def _enter(self, take: Callable[[str | None], str | None], join: Join | None, joined: list[bool]) -> str | None:
        """The device its request goes out with: joined where it may be (its untimed part), else taken; then
        room for what it will hold beside comparers still closing there."""
        if join is not None and self.room is not None:
            gpu, beside = join(self.gpu, self.room)
            joined.append(beside)
        else:
            gpu = take(self.gpu)
        self.batch.settle(gpu, self.room)
        return gpu

    def _quiet(self, take: Callable[[str | None], str | None], settled: list[float],
               resumes: list[Callable[[], None]] | None) -> Go | None:
        """The child's outputs are made: it times its model once it holds the device, no comparer is closing
        there and, where `resumes` collects the call that lets them go on, the device's sharers are frozen (the
        seconds waited are not its run's). No answer where the batch stopped meanwhile."""
        start = time.monotonic()
        try:
            take(self.gpu)
        except EvaluatorError:
            return None
        self.batch.settle(self.gpu)
        if resumes is not None:
            resumes.append(self.batch.sharing.pause(self.gpu, f"the reference of {self.problem.name}"))
        settled.append(time.monotonic() - start)
        return Go(go=True)

    def _pin(self, gpu: str | None) -> str | None:
        self.gpu = gpu
        return gpu

    def _ask(self, line: BaseModel, event: str, doing: str) -> dict | str:
        """The comparer's `event` answer to one line within the asking candidate's budget, or why there is none.
        A comparer lost (dead, or silent that long) is replaced on the device the asking candidate holds and asked
        once more while the budget lasts: a candidate whose request met a lost comparer is judged by the new one.
        One killed through the candidate's own file (_killed_by) is not asked again: that error is the candidate's."""
        with self._lock:
            if self.failure or self.reference is None:
                return self._gone()
            deadline = time.monotonic() + run_budget_s(self.batch.settings, self.reference)
            for _ in range(2):
                if self.lost and (why := self._renew(deadline)):
                    return why
                answer = self._answer(line, event, doing, deadline - time.monotonic())
                if answer is not None or (answer := self._killed_by(line)):
                    return answer
            return self.lost

    def _renew(self, deadline: float) -> str:
        """'' once a fresh comparer replaced the lost one with time left before `deadline`, else why not: none is
        started while the batch stops or once the asking candidate's budget is spent (the next candidate's does)."""
        if self.batch.stop.is_set() or time.monotonic() >= deadline:
            return self.lost
        self._replace(lambda want: self.gpu)
        if self.failure:
            return self._gone()
        return "" if time.monotonic() < deadline else f"kforge's comparer for '{self.problem.name}' came back too late"

    def _gone(self) -> str:
        return f"kforge's comparer for '{self.problem.name}' is gone: {self.failure}"

    def _answer(self, line: BaseModel, event: str, doing: str, within_s: float) -> dict | None:
        """One try: the answer, or None with the comparer stopped (without waiting: a stalled one reads no
        `close`) and why it was lost in `lost`."""
        since = len(self.child.result.messages)
        self.child.send(line)
        answer = self.child.wait_for(event, since, timeout_s=within_s)
        if answer is None:
            stalled = self.child.result.timed_out and not self.child.result.memory_exceeded
            self.child.finish(wait=False)
            silent = f"kforge's comparer for '{self.problem.name}' gave no answer in {within_s:.0f} s"
            self.lost = f"{silent if stalled else _cause(self)} while {doing}"
        return answer

    def _killed_by(self, line: BaseModel) -> dict | None:
        """The candidate's error where the comparer was killed by SIGBUS reading a CPU output file: the file shrank
        under its mapping (a thread of the candidate truncated it; the harness never touches a file it handed
        over). Its later files are not read: it kills one comparer, not one per call. Else None: kforge's loss."""
        if not (isinstance(line, Compare) and line.path and self.child.result.returncode == -signal.SIGBUS):
            return None
        self.killers.add(Path(line.path).parent)
        return {"error": f"the outputs file {Path(line.path).name} shrank while the comparer read it (SIGBUS)"}

    def live(self) -> Child | str:
        """The comparer itself, for a parent that rings it directly (evaluator.parent.trusted_timing): a fresh one
        where it was lost, as the next request would find it; or why there is none."""
        with self._lock:
            if self.failure or self.reference is None:
                return self._gone()
            if self.lost and (why := self._renew(time.monotonic() + run_budget_s(self.batch.settings, self.reference))):
                return why
            return self.child

    def compare(self, label: str, expected: str, trial: int, outputs: list[dict], path: Path | None,
                kept: str | None = None) -> dict:
        """The comparer's answer on one handed-over call (its outputs in `path`, or in the snapshot the comparer
        kept of exchange `kept`'s call); an error entry if it cannot answer (it died)."""
        if path is not None and path.parent in self.killers:
            return {"error": "not read: an earlier outputs file of this candidate shrank while the comparer read it"}
        line = Compare(label=label, expected=expected, trial=trial, outputs=outputs, path=str(path) if path else None,
                       kept=kept)
        answer = self._ask(line, "compared", "comparing a candidate's outputs")
        return answer if isinstance(answer, dict) else {"error": answer, "comparer_died": True}

    def time_block(self, first: int, reps: int) -> list[float] | str:
        """The reference timed on timed reps first.. (beside a candidate's round): its samples, or why not."""
        answer = self._ask(TimeBlock(first=first, reps=reps), "block", "timing the reference beside a candidate")
        return answer if isinstance(answer, str) else answer.get("error") or answer["samples"]

    def close(self) -> None:
        if self.child is None:
            return
        if self.child.proc.poll() is None:
            self.child.send(Close())
        self.child.finish()


class OpenProblems:
    """Which problems have a reference server, on which GPUs, and how many of each problem's candidates are still to be
    judged. A problem is placed on a GPU when its first child is about to start (a spare reference, a candidate
    loaded ahead, its admission): the GPU with the fewest candidates still to be judged among the problems placed
    there (for a spare, among the GPUs short of spares). The dispatcher may serve it on more GPUs (`extend`), where
    they would otherwise idle. On each GPU that serves it the problem has its own reference, timed there, and
    comparer, holding its expected outputs there; a candidate runs on one of them, so outputs never cross devices,
    and its children make their CUDA context there before they hold it (child._warm_cuda). A problem opens on a GPU
    while the comparers open there hold, with what the new one is expected to hold, within _OPEN_SHARE of that
    device, and fewer than _OPEN_PER_DEVICE are open there; the first on a device always opens. `sizes`: the bytes
    one call of a problem moves, where known (evaluator.parent.flops)."""

    def __init__(self, batch: Batch, problems: list[Problem], sizes: Callable[[Problem], int | None] | None = None):
        self.batch, self.sizes = batch, sizes or (lambda problem: None)
        self.remaining = Counter(p.sha256 for p in problems)
        self.servers: dict[tuple[str, str | None, int], ReferenceServer] = {}  # (problem, GPU, pair) -> its server
        self.spares: dict[str, Child] = {}  # for the problem's first GPU
        self.placed: dict[str, list[str | None]] = {}  # problem -> the GPUs serving it, until its last candidate is judged
        self._lock = threading.Lock()
        self._memory = device_memory(batch.settings.device)
        self._closer = ThreadPoolExecutor(max_workers=2, thread_name_prefix="kforge-close")

    def gpu_of(self, problem: Problem, among: list[str | None] | None = None) -> str | None:
        """The problem's first GPU (None on CPU), placed now (on one of `among`, default any) if it has none."""
        with self._lock:
            return self._place(problem, among)

    def gpus_of(self, problem: Problem) -> list[str | None]:
        """The GPUs serving the problem (none before it is placed)."""
        with self._lock:
            return list(self.placed.get(problem.sha256, []))

    def may_extend(self, problem: Problem, gpu: str | None) -> bool:
        """May the placed problem be served on `gpu` too: not yet, it fits there, and its reference failed
        nowhere (it would fail again, after as long)."""
        with self._lock:
            failed = any(self.servers[key].failure for key in self._keys_of(problem))
            if failed or gpu in self.placed.get(problem.sha256, [gpu]):
                return False
        return self.admissible(problem, gpu)

    def extend(self, problem: Problem, gpu: str | None) -> None:
        """Serve the problem on `gpu` too: its candidates admitted there get a reference of their own there."""
        with self._lock:
            self._place(problem)
            if gpu not in self.placed[problem.sha256]:
                self.placed[problem.sha256].append(gpu)

    def is_open(self, problem: Problem) -> bool:
        with self._lock:
            return bool(self._keys_of(problem))

    def _keys_of(self, problem: Problem) -> list[tuple[str, str | None, int]]:
        """The keys of the problem's servers, one per GPU it is open on and process pair (the caller holds the
        lock)."""
        return [key for key in self.servers if key[0] == problem.sha256]

    def _place(self, problem: Problem, among: list[str | None] | None = None) -> str | None:
        if problem.sha256 not in self.placed:
            load = Counter({gpu: 0 for gpu in self.batch.gpus})
            for sha, gpus in self.placed.items():
                for gpu in gpus:
                    load[gpu] += self.remaining[sha]
            self.placed[problem.sha256] = [min(among or self.batch.gpus, key=lambda gpu: load[gpu])]  # ties: the first listed
        return self.placed[problem.sha256][0]

    def admissible(self, problem: Problem, gpu: str | None) -> bool:
        """May the problem open on `gpu` (or is it open there already)?"""
        with self._lock:
            there = [s for (_, on, _), s in self.servers.items() if on == gpu]
            if (problem.sha256, gpu, 0) in self.servers or not there:
                return True
            held = sum(s.reference.footprint if s.reference else self._expected(s.problem) for s in there)
            return len(there) < _OPEN_PER_DEVICE and held + self._expected(problem) <= _OPEN_SHARE * self._memory

    def _expected(self, problem: Problem) -> int:
        """What a problem's comparer will hold before its reference ran: its resident budget, plus one call's
        inputs, weights and output (the timer's), where known. The budget alone counts 12 GB on an H100 for a
        comparer of KernelBench's norm problems that holds ~15 GB (7.5 GB in, 7.5 GB out); honest candidates of
        two of them ran out of GPU memory with ~46 GB held by other processes (level 1 on an H100; which problems were
        open then was not recorded)."""
        return int(_RESIDENT_SHARE * self._memory) + (self.sizes(problem) or 0)

    def held(self, gpu: str | None = None) -> str:
        """The problems open on `gpu` and the device memory each comparer holds (or is expected to, before its
        reference ran), in words: the evidence of a candidate that ran out of GPU memory beside them."""
        with self._lock:
            servers = [s for (_, on, _), s in self.servers.items() if on == gpu]
        held = [f"{s.problem.name} {s.reference.footprint / 1e9:.1f} GB" if s.reference else
                f"{s.problem.name} {self._expected(s.problem) / 1e9:.1f} GB expected" for s in servers]
        return "; ".join(held) or "none"

    def server(self, problem: Problem, gpu: str | None, pair: int = 0) -> ReferenceServer:
        """The problem's server on `gpu` for process pair `pair`, made now if it has none (call only once
        admissible); its child starts later. The spare, started for the problem's first GPU, serves there."""
        with self._lock:
            key = (problem.sha256, gpu, pair)
            if key not in self.servers:
                first = gpu == self._place(problem) and pair == 0
                self.servers[key] = ReferenceServer(self.batch, problem, gpu=gpu, pair=pair, room=self._expected(problem),
                                                    child=self.spares.pop(problem.sha256, None) if first else None)
            return self.servers[key]

    def spare(self, waiting: list[Problem]) -> None:
        """Start the reference children of problems waiting to open (CUDA only), in the order given, up to
        _SPARES_PER_DEVICE on each GPU: their interpreter, torch and FLOP counter load (~7 s on the H100 host)
        before the problem's turn, which came only after the problem before it closed where memory let one
        problem open at a time, or after its first candidate's compile. A spare holds no device memory: it
        touches CUDA only after its request. A problem not yet placed goes where spares are short, so every GPU
        has its next references loading: with one bound for all GPUs, the GPU that ran through its work first
        found none (the second of two H200s waited for 21 of its references' loads in a warm level-1 batch)."""
        for problem in waiting:  # called by the dispatcher's thread alone
            with self._lock:
                if problem.sha256 in self.spares or self._keys_of(problem):
                    continue
                short = [gpu for gpu in self.batch.gpus if self._spared_on(gpu) < _SPARES_PER_DEVICE]
                if not short:
                    return
                gpu = self._place(problem, short)
                if gpu not in short:  # placed before, where the spares are full
                    continue
            child = _spawn(self.batch, problem, gpu)  # outside the lock: runners judging meanwhile need it
            with self._lock:
                self.spares[problem.sha256] = child

    def _spared_on(self, gpu: str | None) -> int:
        return sum(self.placed.get(sha, [None])[0] == gpu for sha in self.spares)

    def expect(self, problem: Problem) -> None:
        """One more candidate of the problem to judge (it arrived while the batch ran)."""
        with self._lock:
            self.remaining[problem.sha256] += 1

    def finished_one(self, problem: Problem) -> None:
        """One candidate of the problem is judged (or failed before running); the last one closes it, or ends
        its spare (its candidates all failed to compile): a spare nobody will take holds a slot."""
        with self._lock:
            self.remaining[problem.sha256] -= 1
            done = self.remaining[problem.sha256] <= 0
            servers = [self.servers.pop(key) for key in self._keys_of(problem)] if done else []
            spare = self.spares.pop(problem.sha256, None) if done else None
            if done:
                self.placed.pop(problem.sha256, None)
        for server in servers:
            self._close(server)
        if spare:
            spare.finish(wait=False)

    def _close(self, server: ReferenceServer) -> None:
        """A comparer closed: on CUDA in the background, its device given back meanwhile (its CUDA context and
        outputs took ~0.27 s to let go of, a tenth of a warm level-1 candidate's hold on the H200); what runs
        there next waits for it as far as its memory or its timing needs (Batch.settle). On CPU now: nothing
        runs beside a timed CPU run."""
        if self.batch.settings.device != "cuda":
            server.close()
            return
        gone = self.batch.closing(server.gpu, server.reference.footprint if server.reference else 0)

        def close() -> None:
            try:
                server.close()
            finally:
                gone()
        try:
            self._closer.submit(close)
        except RuntimeError:  # the batch is ending (close_all ran): close it here
            close()

    def close_all(self) -> None:
        with self._lock:
            servers, self.servers = list(self.servers.values()), {}
            spares, self.spares = list(self.spares.values()), {}
        for server in servers:
            server.close()
        for child in spares:
            child.finish(wait=False)
        self._closer.shutdown(wait=True)
