"""The rules on a candidate's timing: possible at all (the device's peaks, the parent's wall-clock), paired with
the reference beside it or timed apart, the report of how it was timed, and one speedup pooled over fresh
process pairs."""

from __future__ import annotations

import statistics

from evaluator.contracts import EvalSettings, SpeedOfLight, Status, TimingReport
from evaluator.hardware import cpu_peak, device_name, peak
from evaluator.labels import timed_rep
from evaluator.protocol import Probe
from evaluator.statistics import pooled_ratio, ratio_interval, summarize
from evaluator.timing_method import flush_policy, method_name
from evaluator.verdict.case import Case, Outcome, Reference, cheat
from evaluator.verdict.pacing import Paired
from evaluator.verdict.speed_of_light import FACTOR, Floor, floor, impossible
from evaluator.verdict.wall_clock import implausible
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


def check_timing(case: Case) -> Outcome | None:
    """Impossible timings: faster than the device's peaks allow, or not matching the parent's wall-clock."""
    result, device, model = case.result, case.settings.device, case.timed
    if model is None:
        return None
    median, found = summarize(model.samples, method_name(device)).median_ms, physical_floor(case.ref, case.meta, case.settings)
    if isinstance(found, Floor) and (cause := impossible(median, found)):
        return cheat(found.exploit, cause, "timing")
    if case.trusted:  # the parent's clock made the samples: nothing of the child's to hold against it
        return None
    start = result.arrival("stage", stage="timed")
    paused = case.paired.paused_s if case.paired else 0.0  # the loop waited while the parent timed the reference
    per_rep = case.paired.overhead_per_rep_s() if case.paired else None  # never the child's own fill total
    fills = None if per_rep is None else per_rep * len(model.samples)
    problem = implausible(model.samples, model.arrived - start - paused, device, fills) if start is not None \
        else "timings without a timed loop"
    return cheat("timer_escape", problem, "timing") if problem else None


def check_pairing(case: Case) -> Outcome | None:
    """The rounds the candidate reported while it was timed must be the samples it reports at the end."""
    paired, model = case.paired, case.timed
    if paired is None or model is None:
        return None
    if paired.forged:
        return cheat("forged_messages", f"the result channel carried {paired.forged}", "timing")
    if case.trusted and case.result.last("timing", which="model"):
        return cheat("forged_messages", "the result channel carried timings, where kforge's own clock timed it", "timing")
    if case.settings.paired and not paired.failed and not paired.matches(model.samples):
        return cheat("forged_messages", "the timed samples are not the rounds the child reported while it was timed", "timing")
    return None


def usable(case: Case, samples: list[float]) -> bool:
    return case.settings.paired and case.paired is not None and case.paired.usable(samples) and not _disturbed(case)


def _disturbed(case: Case) -> str:
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
    if case.trusted and case.settings.device == "cuda":  # alone: the comparer's in-process events, another clock
        return ""
    beside = statistics.median(s for block in paired.reference for s in block)
    if beside <= (1 + (DISTURBED if case.settings.device == "cuda" else CPU_DISTURBED)) * alone.median_ms:
        return ""
    return (f"the reference ran {100 * (beside / alone.median_ms - 1):.0f} % slower beside the candidate ({beside:.4g} "
            f"ms) than alone ({alone.median_ms:.4g} ms): work the candidate set going outlived its pauses")


def report(case: Case) -> TimingReport | None:
    """How the candidate was timed, for every verdict whose child got that far."""
    model, settings = case.timed, case.settings
    if model is None:
        return None
    found, ref = physical_floor(case.ref, case.meta, settings), case.ref.timing
    mine = summarize(model.samples, method_name(settings.device))
    probe = case.result.read(Probe)
    if usable(case, model.samples):
        pairs = case.paired.reference
        _, low, high = case.paired.ratio()
        reference_calls, speedup_interval = sum(map(len, pairs)), [low, high]
        interval = (f"the median of {len(pairs)} paired ratios: the reference timed beside each round of the "
                    f"candidate, before or after it by a secret coin")
        if settings.device == "cpu":  # identical work in single fresh process pairs: 0.85-1.14x (benchmarks/cpu_pairing.py)
            interval += "; it spans this pair of processes only: fresh ones can time the same work ~10 % apart"
        else:  # reruns of one candidate on an H100 (benchmarks/cuda_rerun_spread.py, docs/benchmarks.md)
            interval += ("; it spans this pair of processes only: reruns in fresh ones moved the same work's speedup "
                         "up to 1.6 % (a 26 us kernel) and 0.04-0.8 % (2.6-10.5 ms calls)")
    else:
        reference_calls, speedup_interval = ref.reps if ref else None, ratio_interval(ref, mine) if ref else None
        interval = "from the two medians' 95 % intervals (reference and candidate timed apart)"
        if disturbed := _disturbed(case):
            interval = f"{disturbed}; so {interval}, the reference's own timing alone"
    return TimingReport(
        method=mine.method, calls=mine.reps, reference_calls=reference_calls, untimed_calls=model.untimed_calls,
        warmup_ms=settings.warmup_ms, l2_flush=flush_policy(settings.device), fresh_inputs=model.fresh_inputs,
        checked_calls=sorted({rep for rep in map(timed_rep, [*(probe.outputs if probe else []), *(case.checks.asked if case.checks else [])])
                              if rep is not None}),
        speedup_interval=speedup_interval, interval=interval,
        floor=found if isinstance(found, str) else f"{FACTOR:g} x {found.ms:.4g} ms ({found.bound}): {found.worked}",
        speed_of_light=None if isinstance(found, str) else SpeedOfLight(
            ms=found.ms, bound=found.bound, arithmetic=found.arithmetic, hardware=found.hardware, flops=found.flops,
            bytes_moved=found.bytes_moved),
        cpu_threads=settings.cpu_threads if settings.device == "cpu" else None)


def pooled(outcomes: list[Outcome], paireds: list[Paired]) -> Outcome:
    """One outcome of a candidate run in several fresh process pairs (CPU, Batch.pairs), each judged in full:
    the first that is not correct decides; else the first's evidence, with the speedup, its interval and both
    sides' timings from the blocks of every pair with a paired ratio, together."""
    for k, outcome in enumerate(outcomes):
        if outcome.status is not Status.CORRECT:
            outcome.evidence.cause = f"in process pair {k + 1} of {len(outcomes)}: {outcome.evidence.cause}"
            return outcome
    kept = [(outcome, paired) for outcome, paired in zip(outcomes, paireds, strict=True) if outcome.speedup]
    first = outcomes[0]  # its evidence stands; the timing is the kept pairs' together
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
