"""Orchestrates a batch: static checks and parallel compiles (evaluator.parent.compiles), one trusted reference per
open problem, then each candidate on the device, alone while anything of it is timed (its untimed stages perhaps
beside another's: evaluator.parent.sharing), judged in this (parent) process (evaluator.parent.verdicts). Yields
verdicts; stores nothing."""

from __future__ import annotations

import functools
import itertools
import logging
import shutil
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Callable, Iterable, Iterator

from evaluator import exchange

from evaluator.parent.batch import BESIDE_SHARE, Batch
from evaluator.parent.hold import Hold, on_free_device
from evaluator.parent.compiles import Prepared, compile_failure, compile_once, free, prepare
from evaluator.verdict.checks import Checks
from evaluator.contracts import CandidateJob, EvalSettings, Evidence, Status, Verdict
from evaluator.parent.flops import ProblemCosts
from evaluator.parent.dispatch import IN_FLIGHT, Dispatcher
from evaluator.sandbox import gpumemory
from evaluator.sandbox.gpumemory import ProcessMemory
from evaluator.verdict.case import Outcome, Reference, harness_call
from evaluator.verdict.pacing import Pacer
from evaluator.protocol import Ack, Check, Go
from evaluator.parent.references import OpenProblems, ReferenceFailed, ReferenceServer, run_budget_s
from evaluator.parent.serving import exchange_of, reference_server, served
from evaluator.parent.stream import Arrivals, JobStream
from evaluator.sandbox.results import Budget, ChildResult
from evaluator.sandbox.spawn import Child
from evaluator.labels import OUTPUT_SUFFIX, timed_rep
from evaluator.parent.verdicts import Ran, judged

_log = logging.getLogger(__name__)


def run_budget(settings: EvalSettings, ref: Reference) -> EvalSettings:
    """The candidate's settings with its run budget (references.run_budget_s) as its timeout."""
    timeout = run_budget_s(settings, ref)
    return settings.model_copy(update={"limits": settings.limits.model_copy(update={"timeout_s": timeout})})


def _opener(batch: Batch, take: Hold) -> Callable[[], None]:
    """Once the candidate's timed rounds ended (Pacer.ended: the parent said stop, and no reference block is
    timed after), its GPU may serve the next problem's reference beside its last, untimed stages (probe, the
    comparisons, its exit), as far as the device's memory leaves room (gpumemory.room): the reference's setup
    and outputs took ~0.3 s of a warm level-1 candidate's ~2.1 s hold on the H200. Said once, on CUDA only."""
    said: list[bool] = []

    def opened() -> None:
        if not said and take.held and batch.settings.device == "cuda":
            said.append(True)
            batch.open_beside(take.device, gpumemory.room(take.device, BESIDE_SHARE))
    return opened


def _relay(batch: Batch, prep: Prepared, server: ReferenceServer, comparisons: dict[str, dict], pacer: Pacer,
           memory: ProcessMemory, waited: dict[str, float], checks: Checks, take: Hold,
           compared: Callable[[], None], serve: Callable[[], None] | None = None):
    """The candidate child's handoffs, answered: each call's outputs go to the problem's comparer, the answer
    is kept for the judge (and the seconds it took in `waited`), and the child is told to go on. On CPU the
    raw-bytes file is removed once judged. Its paces go to the pacer, which times the reference beside its
    rounds; the marks of its leak check, to the reader of its processes' device memory; after each timed call,
    `checks` decides whether it is compared (its wait then counts as the timed loop's pause, as the pacer's).
    On CUDA its probe, once the rounds ended and the verify call was compared, is the comparer's last use by this
    candidate (`compared`): the problem's last candidate lets it close beside its own final check and exit, which
    the next reference's timing would otherwise wait out. A handoff after it was forged: the harness sends its
    probe last. While the candidate shares its device (`take`, sharing.py), a comparison never runs beside
    anything timed there."""
    probed: list[bool] = []
    opened = _opener(batch, take)

    def on_message(message: dict) -> Ack | Check | Go | None:
        if serve is not None and message.get("event") == "serving" and not probed:
            probed.append(True)  # once: it ends the candidate's calls
            serve()
            return None
        if message.get("event") == "probe":
            if pacer.ended and "verify" in comparisons and batch.settings.device == "cuda" and not probed:
                probed.append(True)
                compared()
            return None
        if message.get("event") == "pace":
            go = pacer(message)
            if pacer.ended:
                opened()
            return go
        if message.get("event") == "rep":
            return checks(message)
        if message.get("event") == "leak_mark":
            return memory(message)
        if message.get("event") != "outputs":
            return None
        label = str(message.get("which"))
        if label in comparisons:
            return Ack(ack=label)  # a repeated handoff: the channel check names it
        if probed:
            comparisons[label] = {"error": f"outputs for {label!r} handed over after the probe, which the harness sends last"}
            return Ack(ack=label)
        if serve is not None and (timed_rep(label) is not None or label == "verify"):
            comparisons[label] = {"error": f"outputs for {label!r} handed over by the candidate: kforge reads those itself"}
            return Ack(ack=label)
        if not harness_call(label, server.reference.meta):  # nor a file name kforge would remove
            comparisons[label] = {"error": f"outputs for {label!r}, a call the harness never makes"}
            return Ack(ack=label)
        path = prep.workdir / "out" / f"{label}{OUTPUT_SUFFIX}" if batch.settings.device == "cpu" else None
        trial = int(label.removeprefix("trial_")) if label.startswith("trial_") else -1
        start = time.monotonic()
        with take.untimed():
            comparisons[label] = server.compare(label, label, trial, message.get("outputs"), path)
        waited["comparer"] += time.monotonic() - start
        waited["comparer_work"] += comparisons[label].get("work_s", 0.0)
        waited["comparer_recompute"] += comparisons[label].get("recompute_s", 0.0)
        if path is not None:
            path.unlink(missing_ok=True)
        return Ack(ack=label)
    return on_message


def _spawn_candidate(batch: Batch, prep: Prepared, gpu: str | None, pair: int = 0, hold: Hold | None = None) -> Child:
    """The candidate's child, started (interpreter, jail, torch) for `gpu`, not yet told anything; its forward
    exchange made first, so its jail can name its inputs file. Made through its `hold` where it has one."""
    found = exchange_of(batch, prep, gpu, pair)
    inputs = exchange.create(*found) if found else None
    make = lambda: batch.spawn(prep.workdir, prep.build_dir, prep.job.problem, prep.candidate, gpu=gpu,  # noqa: E731
                               exchange=inputs)
    return hold.spawned(make) if hold else make()


def _judge_candidate(batch: Batch, problems: OpenProblems, costs: ProblemCosts | None, prep: Prepared,
                     compiled: ChildResult, child: Child | None = None, gpu: str | None = None) -> Verdict:
    """The candidate on a free device, then judged once the device is free again (the judge may wait for the
    problem's FLOPs: the first candidates of a batch waited ~3 s for them while holding the GPU). Its problem's
    last candidate closes the comparer once done with it (on CUDA at its probe, see _relay), which lets go of its
    outputs in the background: the next problem's reference makes its outputs beside it only where both fit
    (KernelBench's norm problems hold 7.5 GB a tensor), and nothing is timed there until it is gone (Batch.settle).
    A candidate that shared its device for its untimed stages (evaluator.parent.sharing) and failed is judged again
    alone, in fresh children, before its failure is believed; that verdict is the one returned."""
    finished = functools.cache(functools.partial(problems.finished_one, prep.job.problem))  # once
    ahead = [child] if child is not None else []  # the child loaded ahead serves the first run only

    def run(take: Hold) -> Verdict | Ran:
        first = ahead.pop() if ahead else _spawn_candidate(batch, prep, gpu, hold=take)
        try:  # a run that shared may be run again: its comparer stays open until then
            return _run_compiled(batch, problems, prep, take, first, gpu, lambda: None if take.shared else finished())
        finally:
            if not take.shared:
                finished()

    batch.on_stage(prep.job, "running")
    try:
        found, hold = _judged_run(batch, costs, prep, compiled, run, share=prep.job.path.name)
        if hold.shared and found.status is not Status.CORRECT:
            _log.info("%s was %s beside another candidate (%s): judged again alone", prep.job.path.name,
                      found.status.value, found.evidence.cause)
            beside = f"judged again alone: beside another candidate it was {found.status.value}: {found.evidence.cause}"
            prep.run += 1
            found, _ = _judged_run(batch, costs, prep, compiled, run, share="")
            found.evidence.rejudged_alone = True
            found.evidence.notes.append(beside[:300])
        found.evidence.beside_s = round(hold.beside_s, 3) if hold.shared else None
    finally:
        finished()
        for loaded in ahead:  # the batch stopped before the run began
            loaded.finish(wait=False)
    free(prep.workdir)
    return found


def _judged_run(batch: Batch, costs: ProblemCosts | None, prep: Prepared, compiled: ChildResult,
                run: Callable[[Hold], Verdict | Ran], share: str) -> tuple[Verdict, Hold]:
    """One run of the candidate on a device (shared for its untimed stages where `share` names it), judged."""
    ran, hold = on_free_device(batch, run, share)
    found = _within_budgets(judged(batch, costs, prep.job, compiled, ran), ran) if isinstance(ran, Ran) else ran
    found.evidence.gpu = hold.device
    if hold.waited_s:
        found.evidence.stage_s["device_wait"] = round(hold.waited_s, 3)
    return found, hold


def _within_budgets(found: Verdict, ran: Ran) -> Verdict:
    """A run whose child the parent stopped at a budget of its own is judged by that budget: the judge read a
    kill, or whatever the cut-off run left."""
    over: Budget | None = next((r.result.over for r in [ran, *ran.more] if r.result.over), None)
    if over is None:
        return found
    evidence = found.evidence.model_copy(update={"cause": over.cause, "exploit": ""})
    return found.model_copy(update={"status": over.status, "speedup": None, "evidence": evidence})


def _run_compiled(batch: Batch, problems: OpenProblems, prep: Prepared, take: Hold, child: Child,
                  gpu: str | None, finished: Callable[[], None]) -> Verdict | Ran:
    """The candidate's run, and where Batch.pairs asks for more than one process pair (CPU), the same run again
    in fresh processes on both sides while every run so far is correct and timed: each is judged in full, and
    the speedup pools the ratios of the pairs that have one (verdicts.judged). A pair whose ratio could not stand
    still calls for the next, so whether a candidate is judged in its later processes never hangs on timing
    noise. An interpreted candidate has no speed to pool."""
    settings, text = batch.settings, prep.job.text
    runs = [_run_pair(batch, problems, prep, take, child, gpu, 0, finished)]
    while len(runs) < batch.pairs() and isinstance(runs[-1], Ran) and not settings.interprets(text) \
            and _timed_correct(runs[-1].outcome(settings, prep.job.problem.meta, language=settings.language_of(text))):
        runs.append(_run_pair(batch, problems, prep, take, _spawn_candidate(batch, prep, gpu, len(runs), take), gpu, len(runs),
                              finished))
    first, *more = runs
    if isinstance(first, Ran):  # a later pair whose reference failed where the first's ran: pool what ran
        first.more = [ran for ran in more if isinstance(ran, Ran)]
    return first


def _timed_correct(outcome: Outcome) -> bool:
    return outcome.status is Status.CORRECT and outcome.timing is not None


def _run_pair(batch: Batch, problems: OpenProblems, prep: Prepared, take: Hold, child: Child, gpu: str | None,
              pair: int, finished: Callable[[], None]) -> Verdict | Ran:
    """The candidate's child (started for `gpu`, told nothing yet) loads while the problem's reference there runs
    (if it has not yet); the candidate then runs on that GPU, where the comparer holds its expected outputs.
    `finished`: this candidate is done with the problem (OpenProblems.finished_one, once)."""
    settings, problem = batch.settings, prep.job.problem
    server, comparisons, waited = problems.server(problem, gpu, pair), {}, {"comparer": 0.0, "comparer_work": 0.0, "comparer_recompute": 0.0}
    trusted = batch.trusted_timing()  # then the candidate paces nothing and is asked for no timed call's outputs
    pacer = Pacer(server.time_block, settings.rel_ci, settings.max_reps, on=settings.paired and not trusted)
    memory = ProcessMemory(lambda: take.on if settings.device == "cuda" else None, child.proc.pid)
    checks = Checks(0 if trusted else settings.max_reps)
    pacer.hold = child.paused  # the candidate's processes are stopped while its reference block runs
    waiting = time.monotonic()
    try:
        ref = server.ready(take, take.join, may_run=take.sharer is None)
        if ref is None:  # a sharer with the reference still to run: the device first, outside the comparer's lock
            take(server.gpu)
            ref = server.ready(take, take.join)
    except ReferenceFailed as exc:
        child.finish(wait=False)
        return Verdict.of(prep.job, settings, Status.REFERENCE_ERROR, evidence=Evidence(stage="reference", cause=str(exc)))
    waited_s = time.monotonic() - waiting
    reference = reference_server(batch, prep, server.gpu, pair, take) if trusted else None
    serve = served(batch, prep, server, child, reference, pair, pacer, checks, comparisons, take) if reference else None
    child.on_message = _relay(batch, prep, server, comparisons, pacer, memory, waited, checks,  # it has sent only `loaded`
                              take, finished, serve)
    if child.result.arrival("loaded") is None:
        take.release()  # the reference ran on it; this child takes it again once loaded
    budget = run_budget(settings, ref)
    child.limits = budget.limits
    beside: list[str] = []

    def gate() -> str | None:  # shared where it may be (Hold.enter): the candidate takes it before it is timed
        gpu = take.enter(server.gpu, ref.footprint) if trusted else take(server.gpu)
        take.adopt(child, reference)
        batch.settle(gpu)  # a comparer closing there is gone before anything of the candidate runs
        beside.append(problems.held(gpu))
        return gpu

    found = exchange_of(batch, prep, gpu, pair)
    extra = {"exchange": str(exchange.inputs_path(*found))} if found else {}
    child.begin(batch.request("candidate", problem, prep.workdir / "out", prep.candidate, **extra), gate=gate)
    try:
        return Ran(child.finish(), ref, budget, comparisons, pacer, memory, waited_s, waited, beside, checks=checks)
    finally:
        if reference is not None:
            reference.finish(wait=False)


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
                    failed = compile_failure(batch, prep, future.result())
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
