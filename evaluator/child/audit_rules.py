"""Trivial answers for the problem audit, judged where the expected outputs live (the reference's comparer).

A lenient problem hands out `correct` for free (a well-known suite accepts all zeros on several problems
because its tolerance is absolute and some outputs are tiny). Each trivial answer is built from the
reference's own outputs and inputs and run through the evaluator's compare function.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch

from evaluator.child.correctness import compare_tensor


def _echo(expected: torch.Tensor, inputs: list) -> torch.Tensor | None:
    return next((t for t in inputs if isinstance(t, torch.Tensor) and t.shape == expected.shape and t.dtype == expected.dtype), None)


def _half(expected: torch.Tensor, inputs: list) -> torch.Tensor:
    """Half the work: the first half of the elements right, the rest left at zero."""
    out = expected.clone().reshape(-1)
    out[out.numel() // 2:] = 0
    return out.reshape(expected.shape)


_SAMPLE = 2**24  # elements the best constant is chosen from: a float64 copy of a 6 GB output does not fit beside it


def _mean(expected: torch.Tensor) -> float:
    """The exact mean, summed in float64 a chunk at a time."""
    flat = expected.reshape(-1)
    return sum(float(chunk.double().sum()) for chunk in flat.split(_SAMPLE)) / max(1, flat.numel())


def _median(expected: torch.Tensor) -> float:
    """The median, of a fixed sample where the output is larger than _SAMPLE elements."""
    flat = expected.reshape(-1)
    if flat.numel() > _SAMPLE:
        picks = torch.Generator(device=flat.device).manual_seed(0)
        flat = flat[torch.randint(flat.numel(), (_SAMPLE,), generator=picks, device=flat.device)]
    return float(flat.double().median())


def _filled(expected: torch.Tensor, value: Callable[[torch.Tensor], float]) -> torch.Tensor | None:
    """A constant taken from the expected output itself, None for a single value: there the constant is the
    answer (KernelBench's scalar losses all "passed" it on the H100, benchmarks/problem_audit.py)."""
    return torch.full_like(expected, value(expected)) if expected.numel() > 1 else None


# name -> trivial answer built from (expected output, inputs); None where it does not apply
TRIVIALS: dict[str, Callable[[torch.Tensor, list], torch.Tensor | None]] = {
    "zeros": lambda expected, inputs: torch.zeros_like(expected),
    "constant": lambda expected, inputs: _filled(expected, _median),  # the best single value
    "mean": lambda expected, inputs: _filled(expected, _mean),
    "echo": _echo,
    "half": _half,
}


@dataclass
class _Tally:
    """One trivial answer's outcome so far: it passes only if it passes every output of every label."""

    name: str
    errors: list[float] = field(default_factory=list)
    fractions: list[float] = field(default_factory=list)
    passes: bool = True
    applicable: bool = True

    def judge(self, expected: torch.Tensor, inputs: list, atol: float, rtol: float) -> None:
        got = TRIVIALS[self.name](expected, inputs) if self.applicable else None
        if got is None:
            self.applicable = False
            return
        comparison = compare_tensor(0, expected, got, atol, rtol, expected.device.type)
        del got
        self.errors.append(comparison.max_abs_err)
        self.fractions.append(comparison.mismatch.bad_fraction if comparison.mismatch else 0.0)
        self.passes = self.passes and comparison.mismatch is None

    def result(self) -> dict:
        if not self.applicable:
            return {"trivial": self.name, "passes": False, "applicable": False}
        return {"trivial": self.name, "passes": self.passes and bool(self.errors),
                "max_abs_err": max(self.errors, default=None), "bad_fraction": min(self.fractions, default=None)}


def judge_trivials(labels: Iterable[str], outputs: Callable[[str], list], inputs: Callable[[str], list],
                   atol: float, rtol: float) -> list[dict]:
    """Every trivial answer against every label's outputs, one label's tensors at a time: the comparer
    recomputes the outputs it does not keep, and all labels at once ran 32 of KernelBench's level-1 problems
    out of an H100's memory (benchmarks/problem_audit.py), problems a batch judges there."""
    tallies = [_Tally(name) for name in TRIVIALS]
    for label in labels:
        _judge_label(tallies, outputs(label), inputs(label), atol, rtol)  # its tensors go when it returns
    return [tally.result() for tally in tallies]


def _judge_label(tallies: list[_Tally], expected: list, inputs: list, atol: float, rtol: float) -> None:
    for tensor in (t for t in expected if isinstance(t, torch.Tensor)):
        for tally in tallies:
            tally.judge(tensor, inputs, atol, rtol)
