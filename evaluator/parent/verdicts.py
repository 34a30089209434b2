"""A candidate's run on the device, judged: the verdict with the evidence a user reads (timings and speedup,
stages, memory, notes). The runner schedules the run; this decides what it showed."""

from __future__ import annotations

import dataclasses
import time

from evaluator.parent.batch import Batch
from evaluator.verdict.checks import Checks
from evaluator.contracts import CandidateJob, EvalSettings, Status, Verdict
from evaluator.languages import Language
from evaluator.parent.flops import ProblemCosts
from evaluator.sandbox.gpumemory import ProcessMemory
from evaluator.verdict.case import Outcome, Reference
from evaluator.verdict.rules import judge
from evaluator.verdict.speed import pooled
from evaluator.verdict.pacing import Pacer
from evaluator.protocol import Kernels, Leaks
from evaluator.sandbox.results import ChildResult
from reference_problems import ProblemMeta




def _notes(compiled: ChildResult, *results: ChildResult) -> list[str]:
    notes = []
    if any((result.last("env") or {}).get("confined") is False for result in results):
        notes.append("no seccomp filter in this child (not x86-64, or not permitted): the candidate could have signalled kforge")
    if stragglers := compiled.stragglers + sum(result.stragglers for result in results):
        notes.append(f"killed {stragglers} process(es) the candidate left running after its child ended")
    return notes


def _autotuned(result: ChildResult) -> dict[str, tuple[int, float]]:
    """Each Triton kernel's autotuning as the child reported it with its kernels (none from a malformed message,
    which the judge named)."""
    try:
        kernels = result.read(Kernels)
    except ValueError:
        return {}
    return kernels.autotuned if kernels else {}


def _autotune_cost(found: Verdict, result: ChildResult) -> None:
    """What autotuning cost, in the first trial: before any timing, never timed."""
    if tuned := _autotuned(result):
        found.evidence.stage_s["of_which_autotune"] = round(sum(seconds for _, seconds in tuned.values()), 3)
        found.evidence.notes.append("autotuned before timing, never timed: " + "; ".join(
            f"{name} over {configs} config(s) in {seconds:.2f} s" for name, (configs, seconds) in tuned.items()))


INTERPRETED = ("no speedup: its Triton kernels ran under Triton's interpreter (CPU), which runs a kernel's body as "
               "Python once per program; the times are the interpreter's, not the kernel's")


def _speed(outcome: Outcome, ref: Reference, interpreted: bool) -> dict:
    """Timings and speedups, reported only for a correct candidate; an interpreted one gets its times and a note."""
    timing = outcome.timing
    if outcome.status is not Status.CORRECT or timing is None:
        return {}
    reference = outcome.reference or ref.timing  # timed beside this candidate where the rounds were paired
    if interpreted:
        outcome.evidence.notes.append(INTERPRETED)
        return {"candidate": timing, "reference": reference}
    speedup = outcome.speedup or (reference.median_ms / timing.median_ms if reference else None)
    interval = outcome.evidence.timing and outcome.evidence.timing.speedup_interval
    if speedup:
        outcome.evidence.cause += f"; {speedup:.3g}x vs eager" + (f" (95 %: {interval[0]:.3g}-{interval[1]:.3g}x)" if interval else "")
    return {"candidate": timing, "reference": reference, "compiled_reference": ref.compiled, "speedup": speedup,
            "speedup_vs_compile": ref.compiled.median_ms / timing.median_ms if ref.compiled else None}


@dataclasses.dataclass
class Ran:
    """What a candidate's run on the device leaves for its judge."""

    result: ChildResult
    ref: Reference
    budget: EvalSettings
    comparisons: dict[str, dict]
    pacer: Pacer
    memory: ProcessMemory  # the device memory of the candidate's processes at its leak check's marks
    waited_s: float  # for the problem's reference
    comparer_s: dict[str, float]  # of the candidate's stages: its outputs judged (round trips, the comparer's work in them)
    beside: list[str]  # the open problems' comparers when the device came: evidence for an out-of-memory
    more: list[Ran] = dataclasses.field(default_factory=list)  # the same run in further fresh process pairs (CPU)
    checks: Checks | None = None  # which timed calls kforge asked to compare

    def own_memory(self, settings: EvalSettings) -> ProcessMemory | None:
        """The device memory of the candidate's own processes: read on a GPU only."""
        return self.memory if settings.device == "cuda" else None

    def outcome(self, settings: EvalSettings, meta: ProblemMeta, ref: Reference | None = None,
                language: Language | None = None) -> Outcome:
        return judge(self.result, ref or self.ref, meta, self.budget, self.comparisons, self.pacer.paired,
                     self.own_memory(settings), self.checks, language)


def judged(batch: Batch, costs: ProblemCosts | None, job: CandidateJob, compiled: ChildResult, ran: Ran) -> Verdict:
    """The verdict on what the run left, with the problem's FLOPs (waited for here, on no device)."""
    settings, result, ref = batch.settings, ran.result, ran.ref
    judged_at = time.monotonic()
    if costs:
        ref = dataclasses.replace(ref, flops=costs.flops(job.problem))
    language = settings.language_of(job.text)
    outcome = ran.outcome(settings, job.problem.meta, ref, language)
    if ran.more:
        outcome = pooled([outcome, *(more.outcome(settings, job.problem.meta, dataclasses.replace(more.ref, flops=ref.flops),
                                                  language) for more in ran.more)],
                         [r.pacer.paired for r in (ran, *ran.more)])
    judge_s = time.monotonic() - judged_at
    found = Verdict.of(job, settings, outcome.status, evidence=outcome.evidence,
                       **_speed(outcome, ref, settings.interprets(job.text)))
    build, memory = compiled.last("compiled") or {}, result.last("memory") or {}
    found.evidence.compile_s, found.evidence.cache_hit = build.get("seconds"), build.get("cache_hit")
    found.evidence.build_steps_s = build.get("steps") or {}
    # a build from the cache: how its headers were chosen, as the candidate child's own load chose them again
    found.evidence.build_headers = build.get("headers") or (result.last("compiled") or {}).get("headers") or []
    found.evidence.stage_s = {"compile_child": round(compiled.wall_s, 3), "reference_wait": round(ran.waited_s, 3),
                                "reference_run": round(ref.run_s, 3), **{f"reference_{k}": v for k, v in ref.stage_s.items()},
                                **result.stage_seconds(), "judge": round(judge_s, 3),
                                # within the candidate's stages: its outputs judged, the reference timed beside it
                                "of_which_comparer": round(ran.comparer_s["comparer"], 3),
                                "of_which_comparer_work": round(ran.comparer_s["comparer_work"], 3),
                                "of_which_comparer_recompute": round(ran.comparer_s["comparer_recompute"], 3),
                                "of_which_reference_blocks": round(ran.pacer.paired.paused_s, 3)}
    found.evidence.peak_memory = {k: v for k, v in memory.items() if k not in ("event", "_t")}
    found.evidence.notes += _notes(compiled, result, *(more.result for more in ran.more))
    _autotune_cost(found, result)
    own = ran.own_memory(settings)
    if own is not None and isinstance(why := own.growth(), str) and result.read(Leaks) is not None:
        found.evidence.notes.append(f"leak check counted the memory of the whole device, not the candidate's own: {why}")
    if settings.device == "cuda" and "out of memory" in found.evidence.cause and ran.beside:
        found.evidence.notes.append(f"device memory of the open problems' comparers when it started: {ran.beside[0]}")
    found.evidence.sandbox = (result.last("env") or {}).get("sandbox") or {}
    more_s = sum(more.result.wall_s for more in ran.more)
    found.wall_s = compiled.wall_s + result.wall_s + more_s
    if ran.more:
        found.evidence.stage_s["more_pairs"] = round(more_s, 3)
    return found
