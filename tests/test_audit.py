"""The problem audit: no trivial answer (zeros, a constant, the mean, the input echoed, half the work) may
pass the correctness check of any registered problem."""

from __future__ import annotations

import pytest
import torch

from evaluator.audit import TRIVIALS, audit_problem
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
