"""The comparison itself: allclose's rule, NaN and Inf where the reference has them, exact integers, chunks."""

from __future__ import annotations

import pytest
import torch

from evaluator.child import correctness
from evaluator.child.correctness import compare_tensor


def test_float32_is_judged_as_allclose_judges_it():
    torch.manual_seed(0)
    exp = torch.randn(100_000)
    allowed = 1e-4 + 1e-3 * exp.abs()
    # errors of 0.5x or 1.5x what is allowed, never at the boundary itself
    out = exp + allowed * torch.where(torch.rand(100_000) < 0.001, 1.5, 0.5) * torch.sign(torch.randn(100_000))
    found = compare_tensor(0, exp, out, atol=1e-4, rtol=1e-3)
    bad = ~torch.isclose(out, exp, rtol=1e-3, atol=1e-4)
    assert found.mismatch is not None and found.mismatch.bad_fraction == pytest.approx(bad.float().mean().item())
    assert compare_tensor(0, exp[~bad], out[~bad], atol=1e-4, rtol=1e-3).mismatch is None
    assert 0.49 < compare_tensor(0, exp[~bad], out[~bad], atol=1e-4, rtol=1e-3).tolerance_used <= 0.51


def test_nan_and_inf_pass_only_where_the_reference_has_them():
    exp = torch.tensor([1.0, float("nan"), float("inf"), -float("inf")])
    assert compare_tensor(0, exp, exp.clone(), 1e-4, 1e-4).mismatch is None
    got = exp.clone()
    got[0] = float("nan")
    mismatch = compare_tensor(0, exp, got, 1e-4, 1e-4).mismatch
    assert mismatch.worst_index == [0] and mismatch.reason == "NaN/Inf where the reference is finite"
    got = exp.clone()
    got[2] = 0.0  # inf expected: the error is inf, and so is the allowed error; it failed no check before
    assert compare_tensor(0, exp, got, 1e-4, 1e-4).mismatch.worst_index == [2]
    assert compare_tensor(0, torch.zeros(3), torch.zeros(3), atol=0.0, rtol=0.0).mismatch is None  # 0 / 0 is no error


def test_integers_past_float32_are_judged_exactly():
    """2**24 + 1 is not a float32: judged in float32 it would equal 2**24 and pass."""
    exp = torch.tensor([2**24, 2**40], dtype=torch.int64)
    got = exp + torch.tensor([1, 0])
    assert compare_tensor(0, exp, got, atol=0.5, rtol=0.0).mismatch.worst_index == [0]


def test_half_precision_is_judged_in_float32_and_the_worst_element_is_found_across_chunks(monkeypatch):
    monkeypatch.setattr(correctness, "_CHUNK", 1000)
    exp = torch.zeros(10, 500, dtype=torch.float16)
    got = exp.clone()
    got[7, 123] = 0.25  # in the 4th chunk
    got[2, 5] = 0.125
    mismatch = compare_tensor(0, exp, got, atol=0.01, rtol=0.0).mismatch
    assert mismatch.worst_index == [7, 123] and mismatch.got == 0.25 and mismatch.max_abs_err == 0.25
    assert mismatch.bad_fraction == 2 / 5000
