"""The verdict on one candidate child, reached in the parent from its messages and the comparer's answers.

Checks run in order and the first that fails decides: the result channel, what the child itself caught
(tampering), how it ended, the correctness trials, the outputs of timed calls and of a call on fresh data
written into the same inputs, whether a compiled kernel ran, leaks, and whether the timings are physically
possible. Each `cheat` names its exploit in Evidence.exploit.
"""

from __future__ import annotations

import re
import signal
import statistics
from dataclasses import dataclass, field

from evaluator import diagnose
from evaluator.verdict.checks import Checks
from evaluator.contracts import EvalSettings, Evidence, Mismatch, SpeedOfLight, Status, TimingReport, TimingStats
from evaluator.verdict.speed_of_light import FACTOR, Floor, floor, impossible
from evaluator.sandbox.gpumemory import MARKS, ProcessMemory
from evaluator.hardware import cpu_peak, device_name, peak
from evaluator.verdict.pacing import Paired
from evaluator.protocol import Cheat, Error, Kernels, Leaks, Probe, Trials
from evaluator.sandbox.results import ChildResult
from evaluator.child.timing import flush_policy, method_name
from evaluator.statistics import pooled_ratio, ratio_interval, summarize
from evaluator.verdict.wall_clock import implausible
from evaluator.child.trials import timed_rep
from reference_problems import ProblemMeta

# On a GPU, reference blocks beside the candidate this much slower than the reference timed alone were slowed by
# it. GPU medians of one batch repeat within ~0.5 % (the repairs: 0.05-0.44 % across evaluations), and a false
# alarm costs only the pairing: the speedup is then taken against the reference timed alone, as before pairing.
DISTURBED = 0.05
# On CPU the same, far looser: the reference's blocks beside honest candidates ran 0.94-1.08x its median alone on a
# quiet 2-core VM, but with a core hogged by another process (the load pairing exists to cancel) 0.3 dropped the
# pairing of an identical candidate. Beside a thread that outlasted the freeze it ran 1.62x: that pair is void (the
# freeze did not take) and its loop time unexplained (timer_escape), so this check is only the last layer.
CPU_DISTURBED = 1.0
_LEAK_MIN_BYTES = {"host_rss": 16 * 2**20, "cuda_allocated": 2**20, "cuda_reserved": 2**20, "cuda_driver_used": 8 * 2**20,
                   "cuda_process_used": 8 * 2**20}


@dataclass
class Reference:
    """What the parent keeps of a problem's reference run: descriptions and timings. The expected outputs stay
    with the problem's comparer (evaluator.child.comparer), on the evaluation device."""

    meta: dict[str, list[dict]]  # label -> describe() of each output
    trials: dict[str, dict]
    timing: TimingStats | None = None
    compiled: TimingStats | None = None
    footprint: int = 0  # bytes the comparer holds on its device (host bytes on CPU)
    audit: list[dict] = field(default_factory=list)
    run_s: float = 0.0  # the reference child's seconds from its request to ready: what a candidate's budget follows
    flops: int | None = None  # of one call at the batch's size, counted on the meta device (evaluator.parent.flops)
    stage_s: dict[str, float] = field(default_factory=dict)  # the reference child's stages up to ready

    @property
    def max_input_numel(self) -> int:
        return max(t["max_input_numel"] for t in self.trials.values())


@dataclass
class Outcome:
    status: Status
    evidence: Evidence = field(default_factory=Evidence)
    timing: TimingStats | None = None
    speedup: float | None = None  # the median paired ratio (its interval is in evidence.timing)
    reference: TimingStats | None = None  # the reference's blocks timed beside this candidate


def _cheat(exploit: str, cause: str, stage: str = "", **kw) -> Outcome:
    return Outcome(Status.CHEAT, Evidence(exploit=exploit, stage=stage, cause=f"cheat: {cause}", **kw))


def harness_call(label: str, meta: dict) -> bool:
    """Whether a handed-over call's label names a call the harness makes and the comparer has expected outputs
    for (under that label): a trial, a timed call (inputs from its own seed, shaped as the timing call's), or
    the call on fresh data after timing."""
    if timed_rep(label) is not None:
        return "timing" in meta
    return (label.startswith("trial_") or label == "verify") and label in meta


def timings(result: ChildResult, device: str) -> dict[str, TimingStats]:
    return {m["which"]: summarize(m["samples"], method_name(device)) for m in result.messages if m.get("event") == "timing"}


def ended_badly(result: ChildResult, timeout_s: float, max_input_numel: int) -> Outcome | None:
    """How a child ended if it did not finish normally: timeout, memory, exception, a blocked attack on the
    parent (SIGSYS from the seccomp filter), an exit(0) before any result, or a silent death."""
    if result.last("done") and not (result.timed_out or result.memory_exceeded or result.last("error")):
        return None  # finished: its log is not read
    stage, log = result.stage, result.log_tail(chars=2_000_000)  # whole build log: errors may precede many notes
    if result.timed_out:
        return Outcome(Status.TIMEOUT, Evidence(stage=stage, cause=f"no result after {timeout_s:.0f} s (stage: {stage})", log_tail=log[-2000:]))
    if result.memory_exceeded:
        return Outcome(Status.RUNTIME_ERROR, Evidence(stage=stage, cause=f"exceeded the host memory limit during {stage}", log_tail=log[-2000:]))
    try:
        error = result.read(Error)
    except ValueError as exc:  # the harness sends well-formed errors: candidate code wrote this one (e.g. at import)
        return _cheat("forged_messages", f"the result channel carried a malformed {exc}", stage, log_tail=log[-2000:])
    if error:
        return _error(error, stage, log, max_input_numel)
    code = result.returncode or 0
    if code == -signal.SIGSYS:
        return _cheat("sandbox_escape", f"a system call aimed at kforge itself (signal, ptrace or memory access of the "
                                        f"parent) was blocked and killed the child (stage: {stage})", stage, log_tail=log[-2000:])
    if code == 0:
        return _cheat("early_exit", f"the child exited with status 0 before reporting a result, e.g. os._exit(0) "
                                    f"(stage: {stage})", stage, log_tail=log[-2000:])
    how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
    return Outcome(Status.RUNTIME_ERROR, Evidence(stage=stage, cause=f"child {how} without reporting a result (stage: {stage})",
                                                  hint=diagnose.hint_for(log, max_input_numel), log_tail=log[-2000:]))


_DIRS = re.compile(r"(?<![\w.])/[^\s:]*/(?=[^/\s:]+:\d+)")  # the build dir before "main.cpp:12:": the log keeps it


def _error(error: Error, stage: str, log: str, max_input_numel: int) -> Outcome:
    status = Status.COMPILE_ERROR if stage == "compile" else Status.RUNTIME_ERROR
    text = f"{error.message}\n{log}"
    compiler = diagnose.error_lines(text) if status is Status.COMPILE_ERROR else ""
    lines = (compiler or error.message).strip().splitlines()
    first = _DIRS.sub("", lines[0][:300]) if lines else ""
    return Outcome(status, Evidence(stage=stage, cause=f"{error.exc_type}: {first}", hint=diagnose.hint_for(text, max_input_numel),
                                    log_tail=compiler or error.traceback[-3000:]))


@dataclass
class _Case:
    """Everything the checks look at, and the errors seen so far."""

    result: ChildResult
    ref: Reference
    meta: ProblemMeta
    settings: EvalSettings
    comparisons: dict[str, dict]  # label -> the comparer's answer on that handed-over call
    paired: Paired | None = None  # the reference timed beside the candidate's rounds (evaluator/verdict/pacing.py)
    own_memory: ProcessMemory | None = None  # on a GPU: its processes' device memory at the leak check's marks
    checks: Checks | None = None  # the timed calls kforge asked to compare
    max_abs_err: float = 0.0
    tolerance_used: float = 0.0

    def judge_call(self, label: str, trial: int, what: str) -> Outcome | None:
        """The comparer's answer on one call; a call whose outputs were never handed over, or cannot be read
        as described, was forged by the candidate."""
        answer = self.comparisons.get(label)
        if answer is None:
            return _cheat("forged_outputs", f"{what}: its outputs were never handed to the comparer", "correctness")
        if answer.get("comparer_died") or answer.get("own_failure"):  # kforge's failure, not the candidate's
            return Outcome(Status.REFERENCE_ERROR, Evidence(stage="correctness", cause=f"{what}: {answer['error']}"))
        if answer.get("error"):
            return _cheat("forged_outputs", f"{what}: the outputs handed over cannot be read ({answer['error']})", "correctness")
        if answer.get("late"):
            return _cheat("late_output", f"{what}: {answer['late']}", "timing")
        if answer["mismatch"] is None:
            self.max_abs_err = max(self.max_abs_err, answer["max_abs_err"])
            self.tolerance_used = max(self.tolerance_used, answer["tolerance_used"])
            return None
        m = Mismatch(**answer["mismatch"])
        if answer["stale"]:
            return _cheat("stale_output", f"{what} returned the expected output of another call ({answer['stale']}): a cached "
                                          "or leftover result", "correctness", mismatch=m)
        where = f"; max abs err {m.max_abs_err:.3g} at {m.worst_index}" if m.worst_index else ""
        return Outcome(Status.INCORRECT, Evidence(stage="correctness", mismatch=m, cause=f"{what}: {m.reason}{where}"))


def _channel(case: _Case) -> Outcome | None:
    forged = case.result.forged()
    return _cheat("forged_messages", f"the result channel carried {forged}", case.result.stage) if forged else None


def _caught_in_child(case: _Case) -> Outcome | None:
    found = case.result.read(Cheat)
    return _cheat(found.exploit, found.detail, case.result.stage) if found else None


def _ended(case: _Case) -> Outcome | None:
    return ended_badly(case.result, case.settings.limits.timeout_s, case.ref.max_input_numel)


def _trials(case: _Case) -> Outcome | None:
    report = case.result.read(Trials).trials
    labels = [f"trial_{i}" for i in range(case.settings.trials)]
    if sorted(report) != sorted(labels):
        return _cheat("forged_messages", f"the trials message reports {sorted(report)}, not the trials run", "correctness")
    if unexpected := sorted(label for label in set(case.comparisons) - set(labels) if not harness_call(label, case.ref.meta)):
        return _cheat("forged_messages", f"outputs handed over for calls the harness never makes: {unexpected}", "correctness")
    for trial, label in enumerate(labels):
        entry = report[label]
        if entry.inputs_changed:
            return _cheat("input_mutation", f"trial {trial}: forward() modified its inputs", "correctness")
        if found := case.judge_call(label, trial, f"trial {trial}"):
            return found
    return None


def _probe(case: _Case) -> Outcome | None:
    """The timed calls kforge asked for, every other timed call handed over, and the call on fresh data after
    timing: the child's own list of what it handed over decides nothing."""
    checks = case.checks
    if checks is not None and checks.forged:
        return _cheat("forged_messages", f"the result channel carried {checks.forged}", "timing")
    probe = case.result.read(Probe)
    if probe is not None and probe.inputs_changed:
        return _cheat("input_mutation", "forward() modified its inputs during the leak check or timing", "timing")
    timed = [label for label in case.comparisons if timed_rep(label) is not None]
    asked = checks.asked if checks is not None else []
    for label in dict.fromkeys([*asked, *timed, *(probe.outputs if probe is not None else [])]):
        rep = timed_rep(label)
        what = "a call after new data was written into the same input tensors" if rep is None else f"timed call {rep}"
        if found := case.judge_call(label, -1, f"{what} (after the trials passed)"):
            return found
    return None


def _kernel(case: _Case) -> Outcome | None:
    """A compiled extension must run in every trial, and the reference problem's code in none."""
    kernels, report = case.result.read(Kernels), case.result.read(Trials).trials
    if any(t.calls.reference for t in report.values()):
        return _cheat("calls_reference", "forward() runs the reference problem's code (its Model) instead of a kernel", "correctness")
    if kernels is None or not kernels.modules:
        return _cheat("no_custom_kernel", "no compiled extension: the candidate built or loaded none with "
                                          "torch.utils.cpp_extension, so forward() runs only PyTorch ops", "correctness")
    idle = sorted(label for label, t in report.items() if not t.calls.kernel)
    if idle and not kernels.unverifiable:
        return _cheat("no_custom_kernel", f"forward() never called its compiled extension ({', '.join(kernels.modules)}) "
                                          f"in {', '.join(idle)}: the work is done by PyTorch ops", "correctness")
    return None


def _leak(case: _Case) -> Outcome | None:
    """Memory that grew in both windows of calls, beyond noise: that is a leak, not a one-time cache. On a GPU
    the device memory is what the parent read for the candidate's own processes, where it could (the child's
    own reading counts every process on the device)."""
    report, own = case.result.read(Leaks), case.own_memory
    growth = dict(report.growth)
    if own is not None and own.asked != MARKS:
        return _cheat("forged_messages", f"the leak check had kforge read its device memory {own.asked} times; the "
                                         f"harness asks {MARKS} times", "leak")
    if own is not None and isinstance(read := own.growth(), tuple):
        growth.pop("cuda_driver_used", None)
        growth["cuda_process_used"] = read
    leaked = {k: w[1] for k, w in growth.items() if min(w) > _LEAK_MIN_BYTES[k]}
    if not leaked:
        return None
    cause = "memory grows with every call: " + ", ".join(
        f"{k} +{v / 2**20:.1f} MiB per {report.calls} calls" for k, v in leaked.items())
    return Outcome(Status.LEAK, Evidence(stage="leak", leaked_bytes=leaked, cause=cause))


def physical_floor(ref: Reference, meta: ProblemMeta, settings: EvalSettings) -> Floor | str:
    """The floor a candidate's median is held to, or why there is none. Bytes: the problem's declared
    bytes_moved at full size, else the timing call's inputs and outputs; FLOPs: counted on the reference."""
    device_peak = peak(device_name("cuda")) if settings.device == "cuda" else cpu_peak()
    if device_peak is None:
        return f"none: no peaks known for {device_name(settings.device)} (evaluator.hardware.PEAKS)"
    declared = meta if settings.size == "full" else None
    nbytes = (declared and declared.bytes_moved) or ref.trials["timing"]["io_bytes"]
    found = floor(ref.flops or (declared and declared.flops), nbytes, device_peak)
    return found or (f"none: no FLOPs counted (torch's counter knows matmuls and convolutions) and no bandwidth "
                     f"peak for {device_peak.source}")


def _timed(result: ChildResult) -> dict | None:
    return next((m for m in result.messages if m.get("event") == "timing" and m.get("which") == "model"), None)


def _timing(case: _Case) -> Outcome | None:
    """Impossible timings: faster than the device's peaks allow, or not matching the parent's wall-clock."""
    result, device = case.result, case.settings.device
    model = _timed(result)
    if model is None:
        return None
    median, found = summarize(model["samples"], method_name(device)).median_ms, physical_floor(case.ref, case.meta, case.settings)
    if isinstance(found, Floor) and (cause := impossible(median, found)):
        return _cheat(found.exploit, cause, "timing")
    start = result.arrival("stage", stage="timed")
    paused = case.paired.paused_s if case.paired else 0.0  # the loop waited while the parent timed the reference
    per_rep = case.paired.overhead_per_rep_s() if case.paired else None  # never the child's own fill total
    fills = None if per_rep is None else per_rep * len(model["samples"])
    problem = implausible(model["samples"], model["_t"] - start - paused, device, fills) if start is not None \
        else "timings without a timed loop"
    return _cheat("timer_escape", problem, "timing") if problem else None


def _pairing(case: _Case) -> Outcome | None:
    """The rounds the candidate reported while it was timed must be the samples it reports at the end."""
    paired, model = case.paired, _timed(case.result)
    if paired is None or model is None:
        return None
    if paired.forged:
        return _cheat("forged_messages", f"the result channel carried {paired.forged}", "timing")
    if case.settings.paired and not paired.failed and not paired.matches(model["samples"]):
        return _cheat("forged_messages", "the timed samples are not the rounds the child reported while it was timed", "timing")
    return None


def _usable(case: _Case, samples: list[float]) -> bool:
    return case.settings.paired and case.paired is not None and case.paired.usable(samples) and not _disturbed(case)


def _disturbed(case: _Case) -> str:
    """Why the paired ratio cannot stand, or ''. The freeze stops the candidate's processes while a reference
    block runs; a pair whose freeze did not take is void. What still runs then slows the reference beside the
    candidate and would flatter it: on a GPU, kernels the candidate queued before its pause; on CPU, whatever
    kernel work its processes set going outside themselves (writeback, reclaim). So a reference slower beside
    the candidate than alone (DISTURBED, CPU_DISTURBED) was slowed by it."""
    alone, paired = case.ref.timing, case.paired
    if paired is not None and paired.void:
        return (f"{len(paired.void)} of the reference's blocks could not be timed with the candidate stopped "
                f"({paired.unfrozen})")
    if alone is None or paired is None or not paired.reference:
        return ""
    beside = statistics.median(s for block in paired.reference for s in block)
    if beside <= (1 + (DISTURBED if case.settings.device == "cuda" else CPU_DISTURBED)) * alone.median_ms:
        return ""
    return (f"the reference ran {100 * (beside / alone.median_ms - 1):.0f} % slower beside the candidate ({beside:.4g} "
            f"ms) than alone ({alone.median_ms:.4g} ms): work the candidate set going outlived its pauses")


def _report(case: _Case) -> TimingReport | None:
    """How the candidate was timed, for every verdict whose child got that far."""
    model, settings = _timed(case.result), case.settings
    if model is None:
        return None
    found, ref = physical_floor(case.ref, case.meta, settings), case.ref.timing
    mine = summarize(model["samples"], method_name(settings.device))
    probe = case.result.last("probe") or {"outputs": {}}
    if _usable(case, model["samples"]):
        pairs = case.paired.reference
        _, low, high = case.paired.ratio()
        reference_calls, speedup_interval = sum(map(len, pairs)), [low, high]
        interval = (f"the median of {len(pairs)} paired ratios: the reference timed beside each round of the "
                    f"candidate, before or after it by a secret coin")
        if settings.device == "cpu":  # identical work in single fresh process pairs: 0.85-1.14x (stop 28)
            interval += "; it spans this pair of processes only: fresh ones can time the same work ~10 % apart"
    else:
        reference_calls, speedup_interval = ref.reps if ref else None, ratio_interval(ref, mine) if ref else None
        interval = "from the two medians' 95 % intervals (reference and candidate timed apart)"
        if disturbed := _disturbed(case):
            interval = f"{disturbed}; so {interval}, the reference's own timing alone"
    return TimingReport(
        method=mine.method, calls=mine.reps, reference_calls=reference_calls, untimed_calls=model["untimed_calls"],
        warmup_ms=settings.warmup_ms, l2_flush=flush_policy(settings.device), fresh_inputs=model["fresh_inputs"],
        checked_calls=sorted({rep for rep in map(timed_rep, [*probe["outputs"], *(case.checks.asked if case.checks else [])])
                              if rep is not None}),
        speedup_interval=speedup_interval, interval=interval,
        floor=found if isinstance(found, str) else f"{FACTOR:g} x {found.ms:.4g} ms ({found.bound}): {found.worked}",
        speed_of_light=None if isinstance(found, str) else SpeedOfLight(
            ms=found.ms, bound=found.bound, arithmetic=found.arithmetic, hardware=found.hardware),
        cpu_threads=settings.cpu_threads if settings.device == "cpu" else None)


_MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError)


def _malformed(exc: Exception, result: ChildResult) -> Outcome:
    return _cheat("forged_messages", f"a malformed harness message ({type(exc).__name__}: {exc})", result.stage)


_CHECKS = (_channel, _caught_in_child, _ended, _trials, _probe, _kernel, _leak, _pairing, _timing)


def judge(result: ChildResult, ref: Reference, meta: ProblemMeta, settings: EvalSettings, comparisons: dict[str, dict],
          paired: Paired | None = None, own_memory: ProcessMemory | None = None, checks: Checks | None = None) -> Outcome:
    """The first failing check decides. The harness only sends well-formed messages, so one the checks
    cannot read was written by the candidate: a verdict, never a crash of kforge."""
    case = _Case(result, ref, meta, settings, comparisons, paired, own_memory, checks)
    try:
        found = next(filter(None, (check(case) for check in _CHECKS)), None)
    except _MALFORMED as exc:
        return _malformed(exc, result)
    try:
        report = _report(case)
    except _MALFORMED as exc:  # a forged timing message: a verdict found already stands, without the report
        return found or _malformed(exc, result)
    if found:
        found.evidence.timing = report
        return found
    evidence = Evidence(max_abs_err=case.max_abs_err, tolerance_used=case.tolerance_used, timing=report,
                        cause=f"correct in {settings.trials} trials (max abs err {case.max_abs_err:.3g}, "
                              f"{case.tolerance_used:.2g} of the tolerance)")
    mine = timings(result, settings.device).get("model")
    if mine is None or not _usable(case, _timed(result)["samples"]):
        return Outcome(Status.CORRECT, evidence, mine)
    pooled = summarize([s for block in paired.reference for s in block], mine.method)
    return Outcome(Status.CORRECT, evidence, mine, speedup=paired.ratio()[0], reference=pooled)


def pooled(outcomes: list[Outcome], paireds: list[Paired]) -> Outcome:
    """One outcome of a candidate run in several fresh process pairs (CPU, Batch.pairs), each judged in full:
    the first that is not correct decides; else the first's evidence, with the speedup, its interval and both
    sides' timings from the blocks of every pair with a paired ratio, together."""
    for k, outcome in enumerate(outcomes):
        if outcome.status is not Status.CORRECT:
            outcome.evidence.cause = f"in process pair {k + 1} of {len(outcomes)}: {outcome.evidence.cause}"
            return outcome
    kept = [(outcome, paired) for outcome, paired in zip(outcomes, paireds, strict=True) if outcome.speedup]
    first = outcomes[0]  # a pair runs only after one with a paired ratio: kept starts with it, if with any
    if len(kept) < 2:
        return first
    reference = [block for _, paired in kept for block in paired.reference]
    candidate = [block for _, paired in kept for block in paired.candidate]
    speedup, low, high = pooled_ratio([(paired.reference, paired.candidate) for _, paired in kept])
    reports = [outcome.evidence.timing for outcome, _ in kept]
    timing = reports[0].model_copy(update={
        "calls": sum(r.calls for r in reports), "reference_calls": sum(r.reference_calls or 0 for r in reports),
        "untimed_calls": sum(r.untimed_calls for r in reports), "speedup_interval": [low, high],
        "pair_speedups": [outcome.speedup for outcome, _ in kept],
        "interval": f"the median of {len(reference)} paired ratios from {len(kept)} pairs of fresh processes, each "
                    "placed in memory at random: the reference timed beside each round of the candidate, before or "
                    "after it by a secret coin; the interval resamples the pairs, then the ratios in each"})
    method = first.timing.method
    return Outcome(Status.CORRECT, first.evidence.model_copy(update={"timing": timing}),
                   summarize([s for block in candidate for s in block], method), speedup=speedup,
                   reference=summarize([s for block in reference for s in block], method))
