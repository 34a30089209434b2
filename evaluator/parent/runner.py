"""Orchestrates a batch: static checks, parallel compiles, one trusted reference per open problem, then each
candidate alone on the device, judged in this (parent) process (evaluator.parent.verdicts). Yields verdicts; stores
nothing."""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import shutil
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Callable, Iterable, Iterator

from pydantic import BaseModel

from evaluator.parent import buildcache
from evaluator.parent.batch import Batch, Hold, build_key, on_free_device
from evaluator.verdict.checks import Checks
from evaluator.contracts import CandidateJob, EvalSettings, Evidence, Status, Verdict
from evaluator.parent.flops import ProblemCosts
from evaluator.parent.dispatch import IN_FLIGHT, Dispatcher
from evaluator.sandbox.gpumemory import ProcessMemory
from evaluator.verdict.case import Outcome, Reference, harness_call
from evaluator.verdict.rules import ended_badly
from evaluator.verdict.pacing import Pacer
from evaluator.protocol import Ack, Check, Go
from evaluator.parent.references import OpenProblems, ReferenceFailed, ReferenceServer
from evaluator.parent.stream import Arrivals, JobStream
from evaluator.sandbox.results import Budget, ChildResult
from evaluator.sandbox.spawn import LOG, Child
from evaluator.child.trials import OUTPUT_SUFFIX
from evaluator.parent.verdicts import Ran, judged
from evaluator.static import check_source

_log = logging.getLogger(__name__)


class _Prepared(BaseModel):
    job: CandidateJob
    build_dir: Path
    workdir: Path

    @property
    def candidate(self) -> Path:
        """The job's bytes, written into its scratch by the parent: what its children import and judge."""
        return self.workdir / "src" / self.job.path.name


_RUN_BASE_S, _RUN_FACTOR = 20.0, 10.0


def run_budget(settings: EvalSettings, ref: Reference) -> EvalSettings:
    """A candidate's run (load, trials, leak check, timing, probe) gets 20 s plus 10 times what the reference's run
    took (its trials and timing, the same calls), capped by the limit: a hang is a timeout in about a minute on a
    small problem, not after the cap; a kernel far slower than the reference times out."""
    timeout = min(settings.limits.timeout_s, _RUN_BASE_S + _RUN_FACTOR * ref.run_s)
    return settings.model_copy(update={"limits": settings.limits.model_copy(update={"timeout_s": timeout})})


def prepare(batch: Batch, job: CandidateJob, index: int) -> _Prepared | Verdict:
    """Static checks first: a truncated, non-Python or GPU-only candidate costs no compile. The rest get the job's
    bytes in their scratch: the file itself is not read again."""
    settings = batch.settings
    check = check_source(job.text, settings.language)
    if check.status:
        return Verdict.of(job, settings, check.status, evidence=Evidence(stage="parse", cause=check.cause))
    if check.kernel_free:
        return Verdict.of(job, settings, Status.CHEAT, evidence=Evidence(
            stage="parse", exploit="no_custom_kernel", cause="cheat: no kernel of its own: the file defines, builds "
            "and loads none (no load_inline, Triton, CuTe or TileLang kernel; it imports only torch and pure-Python "
            "modules), so forward() can run only PyTorch ops; read from the code before anything ran"))
    if check.needs_cuda and settings.device != "cuda":
        return Verdict.of(job, settings, Status.SKIPPED,
                        evidence=Evidence(stage="parse", cause="skipped: no CUDA device (the candidate builds or uses CUDA code)"))
    if check.cpu_only and settings.device == "cuda":
        return Verdict.of(job, settings, Status.SKIPPED,
                        evidence=Evidence(stage="parse", cause="skipped: CPU-only extension (load_inline without cuda_sources); use --device cpu"))
    prep = _Prepared(job=job, build_dir=batch.build_root / build_key(job.text, settings.device),
                     workdir=batch.root / f"cand{index:05d}")
    prep.candidate.parent.mkdir(parents=True)
    prep.candidate.write_bytes(job.source)
    return prep


def compile_once(batch: Batch, prep: _Prepared) -> ChildResult:
    """A compile child, unless the key's compile ended before (buildcache.CompileRecord): a compiler error comes back
    from what the parent kept, and a finished build is loaded by the candidate child as it is, which saves a
    process and a torch import (seconds) per candidate on a warm run. The compile child builds in its view of
    the cache; the build is published (and recorded) only when it ended well. One compile of a key at a time
    (buildcache.compiling): a second waits and reads the first's record."""
    with buildcache.compiling(batch.build_root, prep.build_dir):
        memo = buildcache.CompileRecord(batch.build_root, prep.build_dir)
        if (failure := memo.failure()) is not None:
            return failure
        if memo.was_built():
            return _already_built(prep)
        return _compile_child(batch, prep, memo)


def _compile_child(batch: Batch, prep: _Prepared, memo: buildcache.CompileRecord) -> ChildResult:
    if batch.headers is not None:  # CUDA: later compiles take the .gch; this one goes on without (main.o is
        batch.headers.submit(_prepare_headers, batch, prep)  # built beside the .cu, off its critical path)
    else:  # CPU: nothing may compile while a candidate is timed
        _prepare_headers(batch, prep)
    workdir = prep.workdir / "compile"
    result = batch.run("compile", prep.job.problem, workdir, prep.build_dir, prep.candidate)
    outcome = _ended_badly(batch, result)
    if outcome is None and _published(workdir, prep):
        memo.record_built()
    elif outcome is not None and outcome.status is Status.COMPILE_ERROR and not result.cancelled:
        memo.record_failure(result)
    _free(workdir)
    return result


def _prepare_headers(batch: Batch, prep: _Prepared) -> None:
    """The precompiled headers the job's load_inline calls will want, built and published (buildcache)."""
    scratch = batch.root / "pch" / prep.workdir.name
    said = buildcache.prepare_headers(prep.job.text, batch.build_root, scratch, batch.tool(scratch))
    _log.info("precompiled headers for %s: %s", prep.job.path, "; ".join(said) or "none wanted")
    for failed in (s for s in said if "build failed" in s):  # said once per flag set: later compiles read "failed before"
        _log.warning("the precompiled torch header could not be built (%s); main.cpp compiles without it, ~10 s slower each",
                     failed)


def _ended_badly(batch: Batch, result: ChildResult) -> Outcome | None:
    """How a compile child ended if not well: the budget the parent stopped it at, else as the judge reads it."""
    if result.over:
        return Outcome(result.over.status, Evidence(stage=result.stage, cause=result.over.cause,
                                                    log_tail=result.log_tail(2000)))
    return ended_badly(result, batch.settings.limits.timeout_s, 0)


def _free(workdir: Path) -> None:
    """A child's scratch and its view of the cache, removed once it ended (a compile child's build published
    first): what it wrote holds the disk no longer than the child, not until the batch ends. Its log stays."""
    for path in [*(p for p in workdir.iterdir() if p.name != LOG), buildcache.view_dir(workdir)]:
        _remove(path)


def _remove(path: Path) -> None:
    """rmtree, also of dirs left at mode 000 (overlayfs's work dir, or a child's own), which a parent without root
    could not list. The child's processes are gone: nothing swaps a dir for a link meanwhile."""
    for top, dirs, _ in os.walk(path):
        for name in dirs:
            if not os.path.islink(os.path.join(top, name)):
                with contextlib.suppress(OSError):
                    os.chmod(os.path.join(top, name), 0o700)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _published(workdir: Path, prep: _Prepared) -> bool:
    """The compile child's build, moved into the cache; if that fails the candidate child builds it again in its
    own view (slower, never wrong), and the key is not recorded as built."""
    try:
        buildcache.publish(workdir, prep.build_dir)
        return True
    except OSError as exc:
        _log.warning("could not publish the build of %s: %s", prep.job.path, exc)
        return False


def _already_built(prep: _Prepared) -> ChildResult:
    """What a compile child that found the build in place reports, without starting one."""
    now = time.monotonic()
    messages = [{"event": "compiled", "seconds": 0.0, "cache_hit": True, "steps": {}, "_t": now}, {"event": "done", "_t": now}]
    return ChildResult(messages=messages, returncode=0, started=now, log_path=prep.workdir / "compile" / LOG)


def _relay(batch: Batch, prep: _Prepared, server: ReferenceServer, comparisons: dict[str, dict], pacer: Pacer,
           memory: ProcessMemory, waited: dict[str, float], checks: Checks):
    """The candidate child's handoffs, answered: each call's outputs go to the problem's comparer, the answer
    is kept for the judge (and the seconds it took in `waited`), and the child is told to go on. On CPU the
    raw-bytes file is removed once judged. Its paces go to the pacer, which times the reference beside its
    rounds; the marks of its leak check, to the reader of its processes' device memory; after each timed call,
    `checks` decides whether it is compared (its wait then counts as the timed loop's pause, as the pacer's)."""
    def on_message(message: dict) -> Ack | Check | Go | None:
        if message.get("event") == "pace":
            return pacer(message)
        if message.get("event") == "rep":
            return checks(message)
        if message.get("event") == "leak_mark":
            return memory(message)
        if message.get("event") != "outputs":
            return None
        label = str(message.get("which"))
        if label in comparisons:
            return Ack(ack=label)  # a repeated handoff: the channel check names it
        if not harness_call(label, server.reference.meta):  # nor a file name kforge would remove
            comparisons[label] = {"error": f"outputs for {label!r}, a call the harness never makes"}
            return Ack(ack=label)
        path = prep.workdir / "out" / f"{label}{OUTPUT_SUFFIX}" if batch.settings.device == "cpu" else None
        trial = int(label.removeprefix("trial_")) if label.startswith("trial_") else -1
        start = time.monotonic()
        comparisons[label] = server.compare(label, label, trial, message.get("outputs"), path)
        waited["comparer"] += time.monotonic() - start
        waited["comparer_work"] += comparisons[label].get("work_s", 0.0)
        waited["comparer_recompute"] += comparisons[label].get("recompute_s", 0.0)
        if path is not None:
            path.unlink(missing_ok=True)
        return Ack(ack=label)
    return on_message


def _spawn_candidate(batch: Batch, prep: _Prepared, gpu: str | None) -> Child:
    """The candidate's child, started (interpreter, jail, torch) for `gpu`, not yet told anything."""
    return batch.spawn(prep.workdir, prep.build_dir, prep.job.problem, prep.candidate, gpu=gpu)


def _judge_candidate(batch: Batch, problems: OpenProblems, costs: ProblemCosts | None, prep: _Prepared,
                     compiled: ChildResult, child: Child | None = None, gpu: str | None = None) -> Verdict:
    """The candidate on a free device, then judged once the device is free again (the judge may wait for the
    problem's FLOPs: the first candidates of a batch waited ~3 s for them while holding the GPU). Its problem's
    last candidate closes the comparer, which on CUDA lets go of its outputs after the device is given back: the
    next problem's reference makes its outputs beside it only where both fit (KernelBench's norm problems hold
    7.5 GB a tensor), and nothing is timed there until it is gone (Batch.settle)."""
    began = []

    def run(take: Hold) -> Verdict | Ran:
        began.append(True)
        try:
            return _run_compiled(batch, problems, prep, take, child or _spawn_candidate(batch, prep, gpu), gpu)
        finally:
            problems.finished_one(prep.job.problem)

    batch.on_stage(prep.job, "running")
    try:
        ran, hold = on_free_device(batch, run)
    finally:
        if not began:  # the batch stopped before the run began
            problems.finished_one(prep.job.problem)
            if child is not None:
                child.finish(wait=False)
    found = _within_budgets(judged(batch, costs, prep.job, compiled, ran), ran) if isinstance(ran, Ran) else ran
    found.evidence.gpu = hold.device
    if hold.waited_s:
        found.evidence.stage_s["device_wait"] = round(hold.waited_s, 3)
    _free(prep.workdir)
    return found


def _within_budgets(found: Verdict, ran: Ran) -> Verdict:
    """A run whose child the parent stopped at a budget of its own is judged by that budget: the judge read a
    kill, or whatever the cut-off run left."""
    over: Budget | None = next((r.result.over for r in [ran, *ran.more] if r.result.over), None)
    if over is None:
        return found
    evidence = found.evidence.model_copy(update={"cause": over.cause, "exploit": ""})
    return found.model_copy(update={"status": over.status, "speedup": None, "evidence": evidence})


def _run_compiled(batch: Batch, problems: OpenProblems, prep: _Prepared, take: Hold, child: Child,
                  gpu: str | None) -> Verdict | Ran:
    """The candidate's run, and where Batch.pairs asks for more than one process pair (CPU), the same run again
    in fresh processes on both sides while every run so far is correct and timed: each is judged in full, and
    the speedup pools the ratios of the pairs that have one (verdicts.judged). A pair whose ratio could not stand
    still calls for the next, so whether a candidate is judged in its later processes never hangs on timing
    noise. An interpreted candidate has no speed to pool."""
    settings, text = batch.settings, prep.job.text
    runs = [_run_pair(batch, problems, prep, take, child, gpu, 0)]
    while len(runs) < batch.pairs() and isinstance(runs[-1], Ran) and not settings.interprets(text) \
            and _timed_correct(runs[-1].outcome(settings, prep.job.problem.meta, language=settings.language_of(text))):
        runs.append(_run_pair(batch, problems, prep, take, _spawn_candidate(batch, prep, gpu), gpu, len(runs)))
    first, *more = runs
    if isinstance(first, Ran):  # a later pair whose reference failed where the first's ran: pool what ran
        first.more = [ran for ran in more if isinstance(ran, Ran)]
    return first


def _timed_correct(outcome: Outcome) -> bool:
    return outcome.status is Status.CORRECT and outcome.timing is not None


def _run_pair(batch: Batch, problems: OpenProblems, prep: _Prepared, take: Hold, child: Child, gpu: str | None,
              pair: int) -> Verdict | Ran:
    """The candidate's child (started for `gpu`, told nothing yet) loads while the problem's reference there runs
    (if it has not yet); the candidate then runs on that GPU, where the comparer holds its expected outputs."""
    settings, problem = batch.settings, prep.job.problem
    server, comparisons, waited = problems.server(problem, gpu, pair), {}, {"comparer": 0.0, "comparer_work": 0.0, "comparer_recompute": 0.0}
    pacer = Pacer(server.time_block, settings.rel_ci, settings.max_reps, on=settings.paired)
    memory = ProcessMemory(lambda: take.device if take.held and settings.device == "cuda" else None, child.proc.pid)
    checks = Checks(settings.max_reps)
    child.on_message = _relay(batch, prep, server, comparisons, pacer, memory, waited, checks)  # it has sent only `loaded`
    pacer.hold = child.paused  # the candidate's processes are stopped while its reference block runs
    waiting = time.monotonic()
    try:
        ref = server.ready(take)
    except ReferenceFailed as exc:
        child.finish(wait=False)
        return Verdict.of(prep.job, settings, Status.REFERENCE_ERROR, evidence=Evidence(stage="reference", cause=str(exc)))
    waited_s = time.monotonic() - waiting
    if child.result.arrival("loaded") is None:
        take.release()  # the reference ran on it; this child takes it again once loaded
    budget = run_budget(settings, ref)
    child.limits = budget.limits
    beside: list[str] = []

    def gate() -> str | None:
        gpu = take(server.gpu)
        batch.settle(gpu)  # a comparer closing there is gone before anything of the candidate runs
        beside.append(problems.held(gpu))
        return gpu

    child.begin(batch.request("candidate", problem, prep.workdir / "out", prep.candidate), gate=gate)
    return Ran(child.finish(), ref, budget, comparisons, pacer, memory, waited_s, waited, beside, checks=checks)


def _compile_failure(batch: Batch, prep: _Prepared, compiled: ChildResult) -> Verdict | None:
    """A failed compile is judged at once and waits for no device."""
    failed = _ended_badly(batch, compiled)
    return Verdict.of(prep.job, batch.settings, failed.status, evidence=failed.evidence) if failed else None


Stage = Callable[[CandidateJob, str], None]


def evaluate(jobs: Iterable[CandidateJob] | JobStream, settings: EvalSettings,
             on_stage: Stage | None = None) -> Iterator[Verdict]:
    """Judge every job; verdicts are yielded as they are ready (static ones first). Compiles run in parallel
    (on CPU before any timed run); each compiled candidate runs as soon as a device is free and its problem's
    reference is open. A JobStream's jobs join the batch as they arrive (evaluator.parent.stream); on CPU an
    arrival compiles only while nothing is timed, and nothing is timed while it compiles. `on_stage(job, stage)`
    hears each job enter compiling, waiting (compiled, for a device or its problem's reference) and running
    (called from worker threads). However it ends (Ctrl-C, the caller closing the generator, the stream
    cancelled), running children are stopped and the scratch space removed."""
    stream = jobs if isinstance(jobs, JobStream) else None
    batch = Batch(settings, per_device=IN_FLIGHT)
    batch.on_stage = on_stage or (lambda job, stage: None)
    _log.info("%s", batch.compile_why)
    compilers = ThreadPoolExecutor(max_workers=batch.compile_slots)
    runners = ThreadPoolExecutor(max_workers=IN_FLIGHT * len(batch.gpus))
    arrivals = Arrivals(stream)
    cpu, index = settings.device == "cpu", itertools.count()
    batch.headers = None if cpu else ThreadPoolExecutor(max_workers=1, thread_name_prefix="kforge-headers")
    problems = dispatch = None
    try:
        prepared = []
        for job in [] if stream else jobs:
            item = prepare(batch, job, next(index))
            if isinstance(item, Verdict):
                yield item
            else:
                batch.on_stage(job, "compiling")
                prepared.append(item)
        expected = stream.problems if stream else []  # held open until the stream ends
        known = [prep.job.problem for prep in prepared] + expected
        costs = ProblemCosts(batch, known) if settings.timing and known else None
        problems = OpenProblems(batch, known, sizes=costs.bytes_moved if costs else None)
        compiling = {compilers.submit(compile_once, batch, prep): prep for prep in prepared}
        if cpu:  # CPU timings must not share the cores with compilers, nor the introspection
            wait(compiling)
            if costs:
                costs.wait()
        dispatch = Dispatcher(batch, problems, runners, functools.partial(_judge_candidate, batch, problems, costs),
                              spawn=functools.partial(_spawn_candidate, batch))
        dispatch.compiling, dispatch.expected = list(compiling.values()), list(expected)
        pending = set(compiling) | dispatch.admit() | arrivals.waiting()  # on CUDA the first references start
        while pending:  # beside the compiles
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                if future is arrivals.future:
                    got = arrivals.take()
                    if got == "cancelled":
                        return
                    pending |= arrivals.waiting()
                    if got == "end":
                        for problem in dispatch.expected:
                            problems.finished_one(problem)
                        dispatch.expected = []
                    elif isinstance(item := prepare(batch, got, next(index)), Verdict):
                        yield item
                    else:
                        problems.expect(got.problem)
                        batch.on_stage(got, "compiling")
                        arrivals.held.append(item)
                elif future in compiling:
                    prep = compiling[future]
                    dispatch.compiling.remove(prep)
                    failed = _compile_failure(batch, prep, future.result())
                    if failed:
                        problems.finished_one(prep.job.problem)
                        yield failed
                    else:
                        batch.on_stage(prep.job, "waiting")
                        dispatch.ready.append((prep, future.result()))
                else:
                    dispatch.running.discard(future)
                    yield future.result()
            if arrivals.held and not (cpu and dispatch.running):
                for prep in arrivals.held:
                    future = compilers.submit(compile_once, batch, prep)
                    compiling[future] = prep
                    dispatch.compiling.append(prep)
                    pending.add(future)
                arrivals.held = []
            if not (cpu and dispatch.compiling):
                pending |= dispatch.admit()
    finally:
        batch.stop.set()
        arrivals.close()
        for pool in (compilers, runners, batch.headers):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        if dispatch:
            dispatch.close()
        if problems:
            problems.close_all()
        shutil.rmtree(batch.root, ignore_errors=True)
