"""What the verdict's rules look at: the parent's record of a problem's reference run, the outcome a rule
reaches, and one candidate's case (its messages, the comparer's answers, the pairing), with the judgement of
each handed-over call."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from evaluator.contracts import EvalSettings, Evidence, Mismatch, Status, TimingStats
from evaluator.labels import timed_rep
from evaluator.languages import Language
from evaluator.protocol import Compared, Timing
from evaluator.sandbox.gpumemory import ProcessMemory
from evaluator.sandbox.results import ChildResult
from evaluator.statistics import summarize
from evaluator.timing_method import method_name
from evaluator.verdict.checks import Checks
from evaluator.verdict.pacing import Paired
from reference_problems import ProblemMeta


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


def cheat(exploit: str, cause: str, stage: str = "", **kw) -> Outcome:
    return Outcome(Status.CHEAT, Evidence(exploit=exploit, stage=stage, cause=f"cheat: {cause}", **kw))


def harness_call(label: str, meta: dict) -> bool:
    """Whether a handed-over call's label names a call the harness makes and the comparer has expected outputs
    for (under that label): a trial, a timed call (inputs from its own seed, shaped as the timing call's), or
    the call on fresh data after timing."""
    if timed_rep(label) is not None:
        return "timing" in meta
    return (label.startswith("trial_") or label == "verify") and label in meta


def timings(result: ChildResult, device: str) -> dict[str, TimingStats]:
    """The model's timing and, where it was asked for, torch.compile's."""
    found = {which: result.read(Timing, which=which) for which in ("model", "compiled")}
    return {which: summarize(m.samples, method_name(device)) for which, m in found.items() if m}


def answers(comparisons: dict[str, dict]) -> dict[str, Compared]:
    """The comparer's answers as the parent collected them, read once into their model; an entry the parent made
    itself (the comparer gone, a call the harness never makes) carries no label of its own."""
    return {label: Compared.model_validate({"which": label, **answer}) for label, answer in comparisons.items()}


@dataclass
class Case:
    """Everything the checks look at, and the errors seen so far."""

    result: ChildResult
    ref: Reference
    meta: ProblemMeta
    settings: EvalSettings
    comparisons: dict[str, Compared]  # label -> the comparer's answer on that handed-over call
    paired: Paired | None = None  # the reference timed beside the candidate's rounds (evaluator/verdict/pacing.py)
    own_memory: ProcessMemory | None = None  # on a GPU: its processes' device memory at the leak check's marks
    checks: Checks | None = None  # the timed calls kforge asked to compare
    language: Language | None = None  # the kernel language judged: what counts as a kernel of its own
    max_abs_err: float = 0.0
    tolerance_used: float = 0.0

    @functools.cached_property
    def timed(self) -> Timing | None:
        """The candidate's timing: the parent's own where it timed the candidate (a timing message from the child is
        then forged), else its child's message, read once; one that does not fit raises ValueError (the candidate
        wrote it)."""
        if self.trusted:
            return self.paired.timing
        return self.result.read(Timing, which="model")

    @property
    def trusted(self) -> bool:
        """Whether kforge's own process timed the candidate and read its timed outputs."""
        return self.paired is not None and self.paired.timing is not None

    def judge_call(self, label: str, trial: int, what: str) -> Outcome | None:
        """The comparer's answer on one call; a call whose outputs were never handed over, or cannot be read
        as described, was forged by the candidate."""
        answer = self.comparisons.get(label)
        if answer is None:
            return cheat("forged_outputs", f"{what}: its outputs were never handed to the comparer", "correctness")
        if answer.comparer_died or answer.own_failure:  # kforge's failure, not the candidate's
            return Outcome(Status.REFERENCE_ERROR, Evidence(stage="correctness", cause=f"{what}: {answer.error}"))
        if answer.error:
            return cheat("forged_outputs", f"{what}: the outputs handed over cannot be read ({answer.error})", "correctness")
        if answer.late:
            return cheat("late_output", f"{what}: {answer.late}", "timing")
        if answer.mismatch is None:
            self.max_abs_err = max(self.max_abs_err, answer.max_abs_err)
            self.tolerance_used = max(self.tolerance_used, answer.tolerance_used)
            return None
        m = Mismatch.model_validate(answer.mismatch)
        if answer.stale:
            return cheat("stale_output", f"{what} returned the expected output of another call ({answer.stale}): a cached "
                                          "or leftover result", "correctness", mismatch=m)
        where = f"; max abs err {m.max_abs_err:.3g} at {m.worst_index}" if m.worst_index else ""
        return Outcome(Status.INCORRECT, Evidence(stage="correctness", mismatch=m, cause=f"{what}: {m.reason}{where}"))

