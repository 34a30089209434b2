"""The comparison itself: allclose's rule, NaN and Inf where the reference has them, exact integers, chunks."""

from __future__ import annotations

import math

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


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64, torch.int64])
def test_a_chunk_settled_by_its_maxima_reports_what_the_full_check_would(monkeypatch, dtype):
    """The quick maxima settle a chunk only where every value is finite and within tolerance; there they are the
    full check's own (_chunk_errors), to the bit. Chunks of 7 mix settled ones with NaN, Inf, 0 / 0 and failures."""
    monkeypatch.setattr(correctness, "_CHUNK", 7)
    torch.manual_seed(1)
    exp = (torch.randn(700) * 50).to(dtype)
    got = exp + (torch.randn(700) * 1e-3).to(dtype) if dtype.is_floating_point else exp.clone()
    if dtype.is_floating_point:
        exp[[10, 20, 30]], got[[10, 20, 40]] = float("nan"), float("nan")  # both NaN passes; one side NaN fails
        exp[50] = got[50] = float("inf")
    exp[60:67] = got[60:67] = 0
    got[100] += 5
    for atol, rtol in ((1e-2, 1e-2), (0.0, 0.0)):
        found = compare_tensor(0, exp, got, atol, rtol)
        err, ratio, bad = correctness._chunk_errors(exp, got, atol, rtol)
        assert (found.max_abs_err, found.tolerance_used) == (err.max().double().item(), ratio.max().double().item())
        assert found.mismatch.bad_fraction == bad.sum().item() / 700
        for start in range(0, 700, 7):
            e, o = exp[start:start + 7], got[start:start + 7]
            quick = correctness._maxima(e, o, atol, rtol).double().tolist()
            full = correctness._chunk_errors(e, o, atol, rtol)
            if math.isfinite(quick[0]) and quick[1] <= 1:  # a NaN ratio is not <= 1
                assert quick == [full[0].max().double().item(), full[1].max().double().item()]
                assert not full[2].any()
