"""Trusted timing on CPU (evaluator.parent.trusted_timing): the candidate's process is a forward server, and
hostile candidates written against that design change no number of their verdict."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, gains_nothing
from evaluator import CandidateJob, EvalSettings, Status, Verdict, evaluate
from reference_problems import resolve_problem

FORWARD = ROOT / "tests" / "adversarial" / "forward"
NAMES = ["honest", "patch_everything", "early_done", "forge_done", "seeds_from_request", "write_inputs",
         "compute_before_go", "arm_computes_first", "runs_during_fill"]


@pytest.fixture(scope="module")
def verdicts(adversarial_build_root) -> dict[str, Verdict]:
    relu = resolve_problem("relu")
    jobs = [CandidateJob(path=FORWARD / f"{name}.py", problem=relu) for name in NAMES]
    settings = EvalSettings(device="cpu", size="small", trials=3, warmup_ms=5, rep_ms=300, leak_calls=2, jobs=2,
                            build_root=adversarial_build_root, forward_server=True)
    return {Path(v.solution_path).stem: v for v in evaluate(jobs, settings)}


@pytest.mark.slow
def test_the_honest_twin_is_timed_by_kforge_own_clock(verdicts):
    v = verdicts["honest"]
    assert v.status is Status.CORRECT and v.speedup, v.evidence
    assert "only the comparer holds" in v.evidence.timing.fresh_inputs
    assert v.evidence.timing.checked_calls, v.evidence.timing


@pytest.mark.slow
def test_patched_clocks_channel_and_exchange_change_no_number(verdicts):
    """Before this design: every such patch moved the speedup (perf_counter: 1000x, a timer one call in ten: 6.4x).
    Now it gains nothing: its swaps cost its calls a few microseconds, which on this tiny problem can only slow it."""
    honest, patched = verdicts["honest"], verdicts["patch_everything"]
    assert patched.status is Status.CORRECT, patched.evidence
    gains_nothing(patched, honest)


@pytest.mark.slow
def test_done_said_before_the_work_is_seen_in_the_outputs_read_at_done(verdicts):
    v = verdicts["early_done"]
    assert v.status in (Status.CHEAT, Status.INCORRECT), v.evidence
    assert v.evidence.exploit in ("late_output", "stale_output", ""), v.evidence


@pytest.mark.slow
def test_done_written_by_the_candidate_itself_gains_nothing(verdicts):
    """Caught where its `done` lands first (another call's output is read then), else no faster than its twin."""
    gains_nothing(verdicts["forge_done"], verdicts["honest"])


@pytest.mark.slow
def test_the_seeds_a_candidate_finds_in_its_process_predict_no_timed_input(verdicts):
    v = verdicts["seeds_from_request"]
    assert v.status in (Status.INCORRECT, Status.CHEAT), v.evidence
    assert "timed call" in v.evidence.cause or "after new data" in v.evidence.cause, v.evidence


@pytest.mark.slow
def test_no_work_starts_on_the_inputs_before_the_clock(verdicts):
    """A thread that computes each call from its inputs as they appear gains nothing: the comparer holds the timing
    core from the fill to `go`. A server that computes when armed computes the last call's inputs: stale."""
    honest, watcher, early = verdicts["honest"], verdicts["compute_before_go"], verdicts["arm_computes_first"]
    gains_nothing(watcher, honest)
    assert early.status in (Status.CHEAT, Status.INCORRECT), early.evidence
    spy = verdicts["runs_during_fill"]  # it spoils its own outputs once it ran between the fill and `go`
    assert spy.status is Status.CORRECT, spy.evidence.cause


@pytest.mark.slow
def test_timed_inputs_cannot_be_written_by_the_candidate(verdicts):
    v = verdicts["write_inputs"]
    assert v.status in (Status.CHEAT, Status.RUNTIME_ERROR), v.evidence


RELU_SCALE_ADD = ROOT / "tests" / "problems" / "relu_scale_add.py"
HONEST_RSA = ROOT / "tests" / "candidates" / "relu_scale_add" / "honest.py"


@pytest.mark.slow
def test_an_honest_kernel_at_full_size_stays_correct_with_a_core_hogged(build_root):
    """At 256 x 16384 a call takes milliseconds and rounds are one call long: the in-process harness's wall-clock
    check called this kernel `timer_escape` on a loaded 2-core machine. Timed by kforge's own clock there is no
    child's figure to doubt: correct every time."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        problem = resolve_problem(str(RELU_SCALE_ADD))
        settings = EvalSettings(device="cpu", size="full", trials=2, warmup_ms=5, rep_ms=200, leak_calls=2,
                                cpu_pairs=1, build_root=build_root, forward_server=True)
        found = [next(iter(evaluate([CandidateJob(path=HONEST_RSA, problem=problem)], settings))) for _ in range(2)]
    finally:
        hog.kill()
        hog.wait()
    assert [v.status for v in found] == [Status.CORRECT] * 2, [v.evidence.cause for v in found]
    assert all(v.speedup for v in found), [v.evidence.cause for v in found]


@pytest.mark.slow
def test_kforge_failing_while_it_times_is_its_own_failure_never_the_candidates(adversarial_build_root, monkeypatch):
    """An exception in kforge's own handling of a served candidate (here: its comparer's client raising on the
    calls it drew, after the timing) is kforge's failure: no drawn call reads as 'never handed over', no cheat."""
    from evaluator.parent.references import ReferenceServer

    asked = ReferenceServer.compare

    def broken(server, label, *args, **kwargs):
        if label.startswith("timed_") or label == "verify":
            raise RuntimeError("the clock broke")
        return asked(server, label, *args, **kwargs)
    monkeypatch.setattr(ReferenceServer, "compare", broken)
    settings = EvalSettings(device="cpu", size="small", trials=2, warmup_ms=5, rep_ms=100, leak_calls=2, cpu_pairs=1,
                            build_root=adversarial_build_root, forward_server=True)
    (v,) = evaluate([CandidateJob(path=FORWARD / "honest.py", problem=resolve_problem("relu"))], settings)
    assert v.status.kforge_failed and not v.status.judged, v.evidence
    assert "the clock broke" in v.evidence.cause and v.wall_s < 20, (v.evidence.cause, v.wall_s)
