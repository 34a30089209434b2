"""Problem audit: would an output that does no real work pass a problem's correctness check?

A lenient problem hands out `correct` for free (a well-known suite accepts all zeros on several problems
because its tolerance is absolute and some outputs are tiny). For each output of the reference, on every
seed the evaluator draws, this builds trivial answers from the reference's own outputs and inputs and runs
them through the evaluator's compare function. Any that passes is a problem to fix (tolerance or inputs).
"""

from __future__ import annotations

import shutil
from typing import Callable

import torch
from pydantic import BaseModel

from evaluator.contracts import EvalSettings
from evaluator.correctness import compare_tensor
from evaluator.runner import Batch, run_reference
from reference_problems import Problem


class AuditFinding(BaseModel):
    """One trivial answer on one problem; `passes` means the correctness check accepts it (a finding)."""

    problem: str
    trivial: str  # zeros, constant, mean, echo, half
    passes: bool
    applicable: bool = True  # echo needs an input shaped like the output
    max_abs_err: float | None = None  # worst over all seeds and outputs
    bad_fraction: float | None = None  # fraction of elements out of tolerance, at its smallest


def _echo(expected: torch.Tensor, inputs: list) -> torch.Tensor | None:
    return next((t for t in inputs if isinstance(t, torch.Tensor) and t.shape == expected.shape and t.dtype == expected.dtype), None)


def _half(expected: torch.Tensor, inputs: list) -> torch.Tensor:
    """Half the work: the first half of the elements right, the rest left at zero."""
    out = expected.clone().reshape(-1)
    out[out.numel() // 2:] = 0
    return out.reshape(expected.shape)


# name -> trivial answer built from (expected output, inputs); None where it does not apply
TRIVIALS: dict[str, Callable[[torch.Tensor, list], torch.Tensor | None]] = {
    "zeros": lambda expected, inputs: torch.zeros_like(expected),
    "constant": lambda expected, inputs: torch.full_like(expected, float(expected.double().median())),  # best single value
    "mean": lambda expected, inputs: torch.full_like(expected, float(expected.double().mean())),
    "echo": _echo,
    "half": _half,
}


def _judge_trivial(problem: Problem, name: str, outputs: dict[str, list], inputs: dict[str, list]) -> AuditFinding:
    errors, fractions, passes = [], [], True
    for label, expected_list in outputs.items():
        for expected in expected_list:
            got = TRIVIALS[name](expected, inputs[label])
            if got is None:
                return AuditFinding(problem=problem.name, trivial=name, passes=False, applicable=False)
            comparison = compare_tensor(0, expected, got, problem.meta.atol, problem.meta.rtol)
            errors.append(comparison.max_abs_err)
            fractions.append(comparison.mismatch.bad_fraction if comparison.mismatch else 0.0)
            passes = passes and comparison.mismatch is None
    return AuditFinding(problem=problem.name, trivial=name, passes=passes, max_abs_err=max(errors), bad_fraction=min(fractions))


def audit_problem(problem: Problem, device: str = "cpu") -> list[AuditFinding]:
    """Every trivial answer against the problem's check, at its small size, on the evaluator's seeds."""
    batch = Batch(EvalSettings(device=device, size="small", trials=2, timing=False))
    try:
        ref = run_reference(batch, problem, save_inputs=True)
    finally:
        shutil.rmtree(batch.root, ignore_errors=True)
    return [_judge_trivial(problem, name, ref.outputs, ref.inputs) for name in TRIVIALS]
