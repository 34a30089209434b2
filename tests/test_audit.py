"""The problem audit: no trivial answer (zeros, a constant, the mean, the input echoed, half the work) may
pass the correctness check of any registered problem."""

from __future__ import annotations

import weakref

import pytest
import torch

from evaluator.child import audit_rules
from evaluator.child.audit_rules import TRIVIALS
from evaluator.parent.audit import audit_problem
from reference_problems import list_problems
from reference_problems.registry import PROBLEM_DIR

PROBLEMS = [p for p in list_problems() if p.path.parent == PROBLEM_DIR]


@pytest.mark.parametrize("problem", PROBLEMS, ids=[p.name for p in PROBLEMS])
def test_no_trivial_answer_passes(problem):
    findings = audit_problem(problem)
    assert [f.trivial for f in findings] == list(TRIVIALS)
    passing = [f"{f.trivial} (max abs err {f.max_abs_err:.3g})" for f in findings if f.passes]
    assert not passing, f"{problem.name} accepts trivial answers: {passing}"
    assert all(f.max_abs_err > problem.meta.atol for f in findings if f.applicable)


def test_trivial_answers_are_what_they_claim():
    expected, x = torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.ones(2, 2)
    assert TRIVIALS["half"](expected, [x]).tolist() == [[1.0, 2.0], [0.0, 0.0]]
    assert TRIVIALS["echo"](expected, [torch.ones(3), x]) is x
    assert TRIVIALS["echo"](expected, [torch.ones(3)]) is None
    assert TRIVIALS["mean"](expected, [x]).unique().tolist() == [2.5]
    assert TRIVIALS["constant"](torch.tensor(0.25), [x]) is None  # a scalar loss: the constant is the answer


def test_the_audit_holds_one_labels_tensors_at_a_time():
    """The comparer recomputes outputs it does not keep: holding every label's at once ran 32 level-1 problems
    out of an H100's memory. Here each label's outputs must be gone before the next label's are made."""
    alive: list[weakref.ref] = []
    most = 0

    def outputs(label: str) -> list:
        nonlocal most
        most = max(most, sum(ref() is not None for ref in alive))
        made = [torch.full((64,), float(len(label)))]
        alive.append(weakref.ref(made[0]))
        return made

    findings = audit_rules.judge_trivials(["trial_0", "trial_1", "timing", "verify"], outputs,
                                          lambda label: [torch.ones(64)], atol=1e-4, rtol=1e-4)
    assert most == 0 and len(alive) == 4
    assert {f["trivial"]: f["passes"] for f in findings} == {"zeros": False, "constant": True, "mean": True,
                                                             "echo": False, "half": False}


def test_the_best_constant_of_a_large_output_comes_from_a_sample_and_the_mean_is_exact(monkeypatch):
    monkeypatch.setattr(audit_rules, "_SAMPLE", 1000)
    expected = torch.arange(100_001, dtype=torch.float32)
    assert audit_rules._mean(expected) == 50_000.0
    assert abs(audit_rules._median(expected) - 50_000) < 5_000  # the median of 1,000 picks
