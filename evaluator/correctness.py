"""Judging outputs, in the parent, on plain CPU copies: the candidate's process has no say in the comparison."""

from __future__ import annotations

from pathlib import Path

import torch

from evaluator.contracts import Mismatch


def load_outputs(path: Path) -> list:
    return torch.load(path, weights_only=True)


def _structural(trial: int, expected: torch.Tensor, got, meta: dict) -> Mismatch | None:
    """Shape, dtype, device and type must match exactly; broadcasting or casting never rescues an output."""
    problems = []
    if not meta.get("exact_tensor", False):
        problems.append(f"forward returned {meta.get('type')}, not a plain torch.Tensor")
    elif list(expected.shape) != meta["shape"]:
        problems.append(f"shape {tuple(meta['shape'])} != expected {tuple(expected.shape)}")
    elif str(expected.dtype) != meta["dtype"]:
        problems.append(f"dtype {meta['dtype']} != expected {expected.dtype}")
    if problems:
        return Mismatch(trial=trial, max_abs_err=float("inf"), max_rel_err=float("inf"), worst_index=[], reason="; ".join(problems))
    return None


def compare_tensor(trial: int, expected: torch.Tensor, got: torch.Tensor, atol: float, rtol: float) -> Mismatch | None:
    """allclose semantics (|got-exp| <= atol + rtol*|exp|); a NaN or Inf passes only where the reference has the same."""
    exp, out = expected.double(), got.double()
    err = (out - exp).abs().nan_to_num(nan=float("inf"))
    ok = (err <= atol + rtol * exp.abs()) | (exp == out) | (exp.isnan() & out.isnan())
    if bool(ok.all()):
        return None
    bad = ~ok
    flat = int(torch.argmax(torch.where(bad, err, -1.0)))
    index = [int(i) for i in torch.unravel_index(torch.tensor(flat), exp.shape)] if exp.dim() else []
    nonfinite = not bool(torch.isfinite(out[bad]).all())
    return Mismatch(
        trial=trial, max_abs_err=float(err.max()), max_rel_err=float((err / exp.abs().clamp_min(1e-12))[bad].max()),
        worst_index=index, expected=float(exp.reshape(-1)[flat]), got=float(out.reshape(-1)[flat]),
        bad_fraction=float(bad.double().mean()),
        reason="NaN/Inf where the reference is finite" if nonfinite else "values differ beyond tolerance",
    )


def judge_trial(trial: int, ref_path: Path, cand_path: Path, cand_meta: list[dict], atol: float, rtol: float) -> tuple[Mismatch | None, float]:
    """First mismatch of one trial (None if all outputs pass) and the largest absolute error seen."""
    expected, got = load_outputs(ref_path), load_outputs(cand_path)
    if len(expected) != len(got):
        return Mismatch(trial=trial, max_abs_err=float("inf"), max_rel_err=float("inf"), worst_index=[],
                        reason=f"{len(got)} outputs, expected {len(expected)}"), float("inf")
    worst = 0.0
    for exp, out, meta in zip(expected, got, cand_meta):
        mismatch = _structural(trial, exp, out, meta) or compare_tensor(trial, exp, out, atol, rtol)
        if mismatch:
            return mismatch, mismatch.max_abs_err
        worst = max(worst, float((out.double() - exp.double()).abs().max()) if exp.numel() else 0.0)
    return None, worst
