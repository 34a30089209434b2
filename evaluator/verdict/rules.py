"""The verdict on one candidate child, reached in the parent from its messages and the comparer's answers.

Checks run in order and the first that fails decides: the result channel, what the child itself caught
(tampering), how it ended, whether its interpreted Triton kernels compile for a GPU, the correctness trials, the outputs of timed calls and of a call on fresh data
written into the same inputs, whether a compiled kernel ran, leaks, and whether the timings are physically
possible. Each `cheat` names its exploit in Evidence.exploit.
"""

from __future__ import annotations

import re
import signal

from evaluator import diagnose
from evaluator.contracts import EvalSettings, Evidence, Status
from evaluator.labels import timed_rep
from evaluator.languages import Language
from evaluator.protocol import Cheat, Error, KforgeFailure, Kernels, Leaks, Probe, Trials
from evaluator.sandbox.gpumemory import MARKS, ProcessMemory
from evaluator.sandbox.results import ChildResult
from evaluator.statistics import summarize
from evaluator.timing_method import method_name
from evaluator.verdict.case import Case, Outcome, Reference, answers, cheat, harness_call
from evaluator.verdict.checks import Checks
from evaluator.verdict.pacing import Paired
from evaluator.verdict.speed import check_pairing, check_timing, report, usable
from reference_problems import ProblemMeta

_LEAK_MIN_BYTES = {"host_rss": 16 * 2**20, "cuda_allocated": 2**20, "cuda_reserved": 2**20, "cuda_driver_used": 8 * 2**20,
                   "cuda_process_used": 8 * 2**20}


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
        return cheat("forged_messages", f"the result channel carried a malformed {exc}", stage, log_tail=log[-2000:])
    if error:
        return _error(error, stage, log, max_input_numel)
    code = result.returncode or 0
    if code == -signal.SIGSYS:
        return cheat("sandbox_escape", f"a system call aimed at kforge itself (signal, ptrace or memory access of the "
                                        f"parent) was blocked and killed the child (stage: {stage})", stage, log_tail=log[-2000:])
    if code == 0:
        return cheat("early_exit", f"the child exited with status 0 before reporting a result, e.g. os._exit(0) "
                                    f"(stage: {stage})", stage, log_tail=log[-2000:])
    how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
    return Outcome(Status.RUNTIME_ERROR, Evidence(stage=stage, cause=f"child {how} without reporting a result (stage: {stage})",
                                                  hint=diagnose.hint_for(log, max_input_numel), log_tail=log[-2000:]))


_DIRS = re.compile(r"(?<![\w.])/[^\s:]*/(?=[^/\s:]+:\d+)")  # the build dir before "main.cpp:12:": the log keeps it


_AUTOTUNE_TIMEOUT = "AutotuneTimeout"  # a Triton autotuning past its budget (evaluator/child/triton_autotune.py)


def _error(error: Error, stage: str, log: str, max_input_numel: int) -> Outcome:
    if error.exc_type == _AUTOTUNE_TIMEOUT:  # candidate code that raises one itself only fails as it would anyway
        return Outcome(Status.TIMEOUT, Evidence(stage=stage, cause=f"{error.message.strip()[:500]} (stage: {stage})",
                                                log_tail=error.traceback[-3000:]))
    status = Status.COMPILE_ERROR if stage == "compile" else Status.RUNTIME_ERROR
    text = f"{error.message}\n{log}"
    compiler = diagnose.error_lines(text) if status is Status.COMPILE_ERROR else ""
    lines = (compiler or error.message).strip().splitlines()
    first = _DIRS.sub("", lines[0][:300]) if lines else ""
    return Outcome(status, Evidence(stage=stage, cause=f"{error.exc_type}: {first}", hint=diagnose.hint_for(text, max_input_numel),
                                    log_tail=compiler or error.traceback[-3000:]))


def _channel(case: Case) -> Outcome | None:
    forged = case.result.forged()
    return cheat("forged_messages", f"the result channel carried {forged}", case.result.stage) if forged else None


def _caught_in_child(case: Case) -> Outcome | None:
    found = case.result.read(Cheat)
    return cheat(found.exploit, found.detail, case.result.stage) if found else None


def _ended(case: Case) -> Outcome | None:
    outcome = ended_badly(case.result, case.settings.limits.timeout_s, case.ref.max_input_numel)
    error = case.result.last("error")
    if outcome is None or outcome.status is not Status.RUNTIME_ERROR or not error \
            or error.get("exc_type") != KforgeFailure.__name__:
        return outcome
    return _kforge_failed(case, outcome)


def _kforge_failed(case: Case, outcome: Outcome) -> Outcome:
    """kforge's own step in the candidate's child failed (failures.own: out of memory copying or handing over its
    outputs). The child's word is believed only of a candidate its trials showed correct, with a kernel of its
    own: anything in that process could have written the error, and a forged one must not hide a wrong candidate
    from its verdict. Before that, it is the candidate's run that failed."""
    said = outcome.evidence.cause.removeprefix(f"{KforgeFailure.__name__}: ")
    if case.result.read(Trials) is None:
        outcome.evidence.cause = f"{said}, before the candidate's trials passed: counted as its run's failure"
        return outcome
    if found := _trials(case) or _kernel(case):
        return found
    return Outcome(Status.KFORGE_ERROR, outcome.evidence.model_copy(update={
        "cause": f"{said}: kforge's failure, not the candidate's (its trials had passed); a smaller --size needs less"}))


def _trials(case: Case) -> Outcome | None:
    report = case.result.read(Trials).trials
    labels = [f"trial_{i}" for i in range(case.settings.trials)]
    if sorted(report) != sorted(labels):
        return cheat("forged_messages", f"the trials message reports {sorted(report)}, not the trials run", "correctness")
    if unexpected := sorted(label for label in set(case.comparisons) - set(labels) if not harness_call(label, case.ref.meta)):
        return cheat("forged_messages", f"outputs handed over for calls the harness never makes: {unexpected}", "correctness")
    for trial, label in enumerate(labels):
        entry = report[label]
        if entry.inputs_changed:
            return cheat("input_mutation", f"trial {trial}: forward() modified its inputs", "correctness")
        if found := case.judge_call(label, trial, f"trial {trial}"):
            return found
    return None


def _probe(case: Case) -> Outcome | None:
    """The timed calls kforge asked for, every other timed call handed over, and the call on fresh data after
    timing: the child's own list of what it handed over decides nothing."""
    checks = case.checks
    if checks is not None and checks.forged:
        return cheat("forged_messages", f"the result channel carried {checks.forged}", "timing")
    probe = case.result.read(Probe)
    if probe is not None and probe.inputs_changed:
        return cheat("input_mutation", "forward() modified its inputs during the leak check or timing", "timing")
    timed = [label for label in case.comparisons if timed_rep(label) is not None]
    asked = checks.asked if checks is not None else []
    for label in dict.fromkeys([*asked, *timed, *(probe.outputs if probe is not None else [])]):
        rep = timed_rep(label)
        what = "a call after new data was written into the same input tensors" if rep is None else f"timed call {rep}"
        if found := case.judge_call(label, -1, f"{what} (after the trials passed)"):
            return found
    return None


def _gpu_compiled(case: Case) -> Outcome | None:
    """Under Triton's interpreter a kernel's body runs as Python: one that does not compile for a GPU is no Triton
    kernel, whatever its outputs (evaluator/child/triton_cpu.py)."""
    kernels = case.result.read(Kernels)
    if kernels is None or not kernels.not_compiled:
        return None
    name, error = next(iter(kernels.not_compiled.items()))
    return Outcome(Status.COMPILE_ERROR, Evidence(
        stage="compile", cause=f"Triton kernel {name} does not compile for a GPU (sm_90): {error}",
        hint="under the interpreter (CPU) a kernel's body runs as Python; a GPU compiles only Triton's language",
        log_tail="\n".join(f"{k}: {v}" for k, v in kernels.not_compiled.items())))


def _trial_names(labels: list[str]) -> str:
    return ", ".join(label.replace("_", " ") for label in labels)


# a launch language -> its name, and how the candidate's file would have made a kernel in it
_LAUNCHED = {
    Language.TRITON: ("Triton", "no Triton kernel defined: the candidate's file makes none with @triton.jit"),
    Language.CUTE: ("CuTe DSL", "no CuTe DSL kernel compiled from the candidate's file (with @cute.jit)"),
    Language.TILELANG: ("TileLang", "no TileLang kernel compiled from the candidate's file (with @tilelang.jit or "
                                    "tilelang.compile)"),
}


def _launched_kernel(language: Language, kernels: Kernels, report: dict) -> Outcome | None:
    """A kernel made from the candidate's file must launch in every trial; a library's is not its own."""
    name, none_made = _LAUNCHED[language]
    idle = sorted(label for label, t in report.items() if not t.calls.kernel)
    if not kernels.modules:
        return cheat("no_custom_kernel", none_made + (f"; forward() launched only foreign ones ({', '.join(kernels.foreign)})"
                                                      if kernels.foreign else ", so forward() runs only PyTorch ops"), "correctness")
    if not idle:
        return None
    if kernels.foreign and all(report[label].calls.foreign for label in idle):
        return cheat("no_custom_kernel", f"forward() launched only {name} kernels defined elsewhere "
                                          f"({', '.join(kernels.foreign)}) in {_trial_names(idle)}, none of its own "
                                          f"({', '.join(kernels.modules)})", "correctness")
    return cheat("no_custom_kernel", f"its {name} kernels ({', '.join(kernels.modules)}) never launched in "
                                      f"{_trial_names(idle)}: the work is done by PyTorch ops", "correctness")


def _kernel(case: Case) -> Outcome | None:
    """A kernel of the candidate's own must run in every trial (an extension's function called, or for Triton, the
    CuTe DSL and TileLang one of its kernels launched), and the reference problem's code in none."""
    kernels, report = case.result.read(Kernels), case.result.read(Trials).trials
    if any(t.calls.reference for t in report.values()):
        return cheat("calls_reference", "forward() runs the reference problem's code (its Model) instead of a kernel", "correctness")
    if case.language in _LAUNCHED:
        return _launched_kernel(case.language, kernels or Kernels(), report)
    if kernels is None or not kernels.modules:
        return cheat("no_custom_kernel", "no compiled extension: the candidate built or loaded none with "
                                          "torch.utils.cpp_extension, so forward() runs only PyTorch ops", "correctness")
    idle = sorted(label for label, t in report.items() if not t.calls.kernel)
    if idle and not kernels.unverifiable:
        return cheat("no_custom_kernel", f"forward() never called its compiled extension ({', '.join(kernels.modules)}) "
                                          f"in {', '.join(idle)}: the work is done by PyTorch ops", "correctness")
    return None


def _leak(case: Case) -> Outcome | None:
    """Memory that grew in both windows of calls, beyond noise: that is a leak, not a one-time cache. On a GPU
    the device memory is what the parent read for the candidate's own processes, where it could (the child's
    own reading counts every process on the device)."""
    report, own = case.result.read(Leaks), case.own_memory
    growth = dict(report.growth)
    if own is not None and own.asked != MARKS:
        return cheat("forged_messages", f"the leak check had kforge read its device memory {own.asked} times; the "
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


_MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError)


def _malformed(exc: Exception, result: ChildResult) -> Outcome:
    return cheat("forged_messages", f"a malformed harness message ({type(exc).__name__}: {exc})", result.stage)


_CHECKS = (_channel, _caught_in_child, _ended, _gpu_compiled, _trials, _probe, _kernel, _leak, check_pairing, check_timing)


def judge(result: ChildResult, ref: Reference, meta: ProblemMeta, settings: EvalSettings, comparisons: dict[str, dict],
          paired: Paired | None = None, own_memory: ProcessMemory | None = None, checks: Checks | None = None,
          language: Language | None = None) -> Outcome:
    """The first failing check decides. The harness only sends well-formed messages, so one the checks
    cannot read was written by the candidate: a verdict, never a crash of kforge."""
    try:
        case = Case(result, ref, meta, settings, answers(comparisons), paired, own_memory, checks, language)
        found = next(filter(None, (check(case) for check in _CHECKS)), None)
    except _MALFORMED as exc:
        return _malformed(exc, result)
    try:
        how = report(case)
    except _MALFORMED as exc:  # a forged timing message: a verdict found already stands, without the report
        return found or _malformed(exc, result)
    if found:
        found.evidence.timing = how
        return found
    evidence = Evidence(max_abs_err=case.max_abs_err, tolerance_used=case.tolerance_used, timing=how,
                        cause=f"correct in {settings.trials} trials (max abs err {case.max_abs_err:.3g}, "
                              f"{case.tolerance_used:.2g} of the tolerance)")
    model = case.timed
    mine = summarize(model.samples, method_name(settings.device)) if model else None
    if mine is None or not usable(case, model.samples):
        return Outcome(Status.CORRECT, evidence, mine)
    pooled = summarize([s for block in paired.reference for s in block], mine.method)
    return Outcome(Status.CORRECT, evidence, mine, speedup=paired.ratio()[0], reference=pooled)
