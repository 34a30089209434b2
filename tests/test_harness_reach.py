"""Hostile candidates that reach the harness code running in their own process (the problem module, child-side
modules, the timing loop's frames, output pages read after the timer, input fills), against the real evaluator,
and the parent's choice of checked calls on its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT, gains_nothing
from evaluator import CandidateJob, EvalSettings, Status, Verdict, evaluate
from evaluator.verdict.checks import CHECKED, Checks
from reference_problems import resolve_problem

RELU = ROOT / "tests" / "adversarial" / "relu"
VARYING = ROOT / "tests" / "problems" / "varying_relu.py"
HONEST_VARYING = ROOT / "tests" / "candidates" / "varying_relu" / "honest.py"
HOSTILE = ["frame_reader", "wrap_get_inputs", "misfit_inputs", "patch_probe_list", "lazy_pages", "profile_hook",
           "gc_callback"]


@pytest.fixture(scope="module")
def verdicts(adversarial_build_root) -> dict[str, Verdict]:
    """One batch. Its timing budget makes rounds of several reps, so a candidate that works only where a round
    ends skips most timed calls."""
    relu = resolve_problem("relu")
    jobs = [CandidateJob(path=RELU / f"{name}.py", problem=relu) for name in [*HOSTILE, "honest_captured"]]
    jobs.append(CandidateJob(path=HONEST_VARYING, problem=resolve_problem(str(VARYING))))
    settings = EvalSettings(device="cpu", size="small", trials=3, warmup_ms=5, rep_ms=300, leak_calls=2, jobs=2,
                            cpu_pairs=1, build_root=adversarial_build_root)
    return {Path(v.solution_path).stem: v for v in evaluate(jobs, settings)}


@pytest.mark.slow
@pytest.mark.parametrize(("name", "text"), [("wrap_get_inputs", "kforge_problem.get_inputs"),
                                            ("patch_probe_list", "evaluator.protocol.Probe")])
def test_a_patched_problem_or_child_module_is_tampering(verdicts, name, text):
    v = verdicts[name]
    assert (v.status, v.evidence.exploit) == (Status.CHEAT, "judge_tampering"), v.evidence
    assert "at import: " in v.evidence.cause and text in v.evidence.cause, v.evidence.cause


@pytest.mark.slow
def test_inputs_that_stop_fitting_stay_fresh(verdicts):
    """Its cache of the first timed call would pass on inputs kept as they were. Its timed inputs are the
    comparer's, and the timed calls are compared with the reference's own: wrong, or no faster than honest."""
    gains_nothing(verdicts["misfit_inputs"], verdicts["honest_captured"])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["frame_reader", "lazy_pages", "profile_hook"])
def test_what_the_frames_and_the_pages_hide_is_judged(verdicts, name):
    """Correct only at about the honest kernel's own speed, else not correct. Unjudged, either skips nearly all
    its timed work (~10x and more here); the bound leaves room for this VM, where one kernel's CPU evaluations in
    fresh processes differ by up to ~20 % (lazy_pages' own loop, faulted in, timed 1.05-1.2x the shared one)."""
    gains_nothing(verdicts[name], verdicts["honest_captured"], spread=1.5)


@pytest.mark.slow
def test_work_left_for_a_hook_after_the_timer_is_never_done(verdicts):
    """A profile hook that does the call's work once forward() returned: kforge's process reads the outputs at
    `done`, so the work is either inside its clock or missing from what it read (left in an in-process harness,
    the hook was `correct` at 34x its honest kernel)."""
    gains_nothing(verdicts["profile_hook"], verdicts["honest_captured"])


@pytest.mark.slow
def test_work_a_gc_callback_does_after_the_timergains_nothing(verdicts):
    """A gc callback that runs the work in the server's own thread, around the call: inside kforge's clock, or
    after `done` and so missing from what it read then."""
    gains_nothing(verdicts["gc_callback"], verdicts["honest_captured"])


@pytest.mark.slow
def test_a_problem_whose_shapes_change_with_the_seed_judges_an_honest_kernel_correct(verdicts):
    v = verdicts["honest"]
    assert v.status is Status.CORRECT and v.speedup, v.evidence
    assert "only the comparer holds" in v.evidence.timing.fresh_inputs


def test_the_parent_checks_each_call_at_random_after_it_ran():
    checks = Checks(max_reps=10_000)
    answers = [checks({"event": "rep", "which": 0, "reps": 10, "least": 40, "_t": 0.0}).checked for _ in range(400)]
    assert 0.6 * CHECKED * 100 < sum(map(len, answers)) < 1.4 * CHECKED * 100  # CHECKED per 40 reps sure to run
    assert checks.asked == [f"timed_{rep}" for answer in answers for rep in answer]
    assert all(0 <= rep < 10 for answer in answers for rep in answer)
    assert not checks.forged


def test_past_the_reps_sure_to_run_the_odds_of_a_check_fall_with_the_rep():
    checks = Checks(max_reps=100_000)
    late = sum(len(checks({"event": "rep", "which": 400, "reps": 1, "least": 20, "_t": 0.0}).checked) for _ in range(20_000))
    assert 0.6 * CHECKED * 50 < late < 1.4 * CHECKED * 50  # CHECKED / 401 of 20,000


@pytest.mark.parametrize("message", [{"event": "rep", "which": 10_000, "reps": 1, "least": 20},
                                     {"event": "rep", "which": 0, "reps": 11, "least": 20},
                                     {"event": "rep", "which": 3, "reps": 1, "least": 0}, {"event": "rep", "which": "x"}])
def test_a_rep_message_the_harness_would_not_send_is_refused(message):
    checks = Checks(max_reps=10_000)
    assert checks(message).checked == []
    assert checks.forged and not checks.asked
