"""Trivial answers for the problem audit, judged where the expected outputs live (the reference's comparer).

A lenient problem hands out `correct` for free (a well-known suite accepts all zeros on several problems
because its tolerance is absolute and some outputs are tiny). Each trivial answer is built from the
reference's own outputs and inputs and run through the evaluator's compare function.
"""

from __future__ import annotations

from typing import Callable

import torch

from evaluator.correctness import compare_tensor


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


def judge_trivial(name: str, outputs: dict[str, list], inputs: dict[str, list], atol: float, rtol: float) -> dict:
    """Does trivial answer `name` pass on every label and output? With its worst error and smallest bad fraction."""
    errors, fractions, passes = [], [], True
    for label, expected_list in outputs.items():
        for expected in expected_list:
            if not isinstance(expected, torch.Tensor):
                continue
            got = TRIVIALS[name](expected, inputs[label])
            if got is None:
                return {"trivial": name, "passes": False, "applicable": False}
            comparison = compare_tensor(0, expected, got, atol, rtol, expected.device.type)
            errors.append(comparison.max_abs_err)
            fractions.append(comparison.mismatch.bad_fraction if comparison.mismatch else 0.0)
            passes = passes and comparison.mismatch is None
    return {"trivial": name, "passes": passes and bool(errors), "max_abs_err": max(errors, default=None),
            "bad_fraction": min(fractions, default=None)}
