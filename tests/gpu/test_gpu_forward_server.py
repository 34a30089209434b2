"""CUDA forward serving (EvalSettings.cuda_forward_server): the candidate's process only runs `forward`; the
comparer's stream holds the clock and reads the outputs (evaluator.child.cuda_fills). An honest candidate's
verdict is the in-process design's; a candidate that patches the in-process clock gains nothing; work left for
after the call is caught; a forward that waits for the GPU is let run, not held until it times out."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conftest import ROOT, gains_nothing
from evaluator import CandidateJob, EvalSettings, Status, evaluate
from reference_problems import resolve_problem

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

CUDA = ROOT / "tests" / "adversarial" / "cuda"
PROBLEM = ROOT / "tests" / "problems" / "relu_scale_add.py"


HONEST = ROOT / "tests" / "candidates" / "relu_scale_add"


def _judged(names: list[str], build_root: Path, forward: bool) -> dict:
    settings = EvalSettings(device="cuda", size="full", trials=2, leak_calls=2, rep_ms=300, build_root=build_root,
                            cuda_forward_server=forward)
    problem = resolve_problem(str(PROBLEM))
    jobs = [CandidateJob(path=(HONEST if name.endswith("_cuda") else CUDA) / f"{name}.py", problem=problem)
            for name in names]
    return {Path(v.solution_path).stem: v for v in evaluate(jobs, settings)}


@pytest.fixture(scope="module")
def served(build_root) -> dict:
    return _judged(["same_as_reference", "honest_cuda", "elapsed_tenth", "late_stream", "synchronized_cuda"], build_root,
                   forward=True)


@pytest.fixture(scope="module")
def in_process(build_root) -> dict:
    return _judged(["same_as_reference", "honest_cuda", "elapsed_tenth", "synchronized_cuda"], build_root, forward=False)


def test_an_identical_candidate_reads_about_one_and_as_in_process(served, in_process):
    twin, before = served["same_as_reference"], in_process["same_as_reference"]
    assert twin.status is Status.CORRECT and before.status is Status.CORRECT, (twin.evidence.cause, before.evidence.cause)
    assert 0.9 <= twin.speedup <= 1.1, twin.evidence.cause
    assert "only the comparer holds" in twin.evidence.timing.fresh_inputs


def test_a_fast_kernel_gets_the_in_process_speedup(served, in_process):
    """The steps' own cost (the switches between the comparer's context and the server's, an empty call's window)
    is taken off both sides: a 0.03 ms kernel's speedup is then the in-process design's, not pulled toward 1."""
    fast, before = served["honest_cuda"], in_process["honest_cuda"]
    assert fast.status is Status.CORRECT and before.status is Status.CORRECT, (fast.evidence.cause, before.evidence.cause)
    assert abs(fast.speedup / before.speedup - 1) < 0.1, (fast.speedup, before.speedup)


def test_a_patched_elapsed_time_changes_no_number(served, in_process):
    assert in_process["elapsed_tenth"].status is not Status.CORRECT or in_process["elapsed_tenth"].speedup > 5
    gains_nothing(served["elapsed_tenth"], served["same_as_reference"])


def test_work_left_for_after_the_call_is_caught(served):
    late = served["late_stream"]
    assert late.status in (Status.CHEAT, Status.INCORRECT), late.evidence.cause


def test_a_forward_that_waits_for_the_gpu_is_let_run(served, in_process):
    """Its call cannot be queued while the head is held: after PATIENCE_S the head runs, and every later call of
    both sides runs as queued. Its window then holds the host's time and kforge's round trip as well, so its speedup
    may read lower than in its own process, never higher; what was done is said."""
    synced, before = served["synchronized_cuda"], in_process["synchronized_cuda"]
    assert synced.status is Status.CORRECT and before.status is Status.CORRECT, (synced.evidence.cause, before.evidence.cause)
    assert "waited for the GPU" in synced.evidence.timing.fresh_inputs
    assert 0.5 * before.speedup < synced.speedup < 1.1 * before.speedup, (synced.speedup, before.speedup)
    assert "waited for the GPU" not in served["honest_cuda"].evidence.timing.fresh_inputs
