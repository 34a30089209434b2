"""Judging outputs, in the parent, on plain CPU copies: the candidate's process has no say in the comparison."""

from __future__ import annotations

import math
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


_CHUNK = 2**24  # elements compared at a time: float64 temporaries stay small for multi-GB outputs


def _chunk_errors(exp: torch.Tensor, out: torch.Tensor, atol: float, rtol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Absolute error (NaN -> inf) and failure mask of one chunk, in float64."""
    exp, out = exp.double(), out.double()
    err = (out - exp).abs().nan_to_num(nan=float("inf"))
    ok = (err <= atol + rtol * exp.abs()) | (exp == out) | (exp.isnan() & out.isnan())
    return err.masked_fill(exp.isnan() & out.isnan(), 0.0), ~ok


def compare_tensor(trial: int, expected: torch.Tensor, got: torch.Tensor, atol: float, rtol: float,
                   device: str = "cpu") -> tuple[Mismatch | None, float]:
    """allclose semantics (|got-exp| <= atol + rtol*|exp|); NaN/Inf pass only where the reference has the same.

    Works chunk by chunk on `device` (the GPU when there is one): a 2 GB output is judged in seconds.
    Returns the mismatch (None if all pass) and the largest absolute error.
    """
    exp_flat, out_flat = expected.reshape(-1), got.reshape(-1)
    n_bad, worst_err, worst_at, worst_bad_err, max_rel = 0, 0.0, 0, -1.0, 0.0
    for start in range(0, exp_flat.numel(), _CHUNK):
        exp, out = exp_flat[start:start + _CHUNK].to(device), out_flat[start:start + _CHUNK].to(device)
        err, bad = _chunk_errors(exp, out, atol, rtol)
        worst_err = max(worst_err, float(err.max()))
        if not bool(bad.any()):
            continue
        n_bad += int(bad.sum())
        max_rel = max(max_rel, float((err / exp.double().abs().clamp_min(1e-12))[bad].max()))
        at = int(torch.argmax(torch.where(bad, err, -1.0)))
        if float(err[at]) > worst_bad_err:
            worst_bad_err, worst_at = float(err[at]), start + at
    if n_bad == 0:
        return None, worst_err
    index = [int(i) for i in torch.unravel_index(torch.tensor(worst_at), expected.shape)] if expected.dim() else []
    got_value = float(out_flat[worst_at])
    return Mismatch(
        trial=trial, max_abs_err=worst_err, max_rel_err=max_rel, worst_index=index,
        expected=float(exp_flat[worst_at]), got=got_value, bad_fraction=n_bad / max(1, exp_flat.numel()),
        reason="values differ beyond tolerance" if math.isfinite(got_value) else "NaN/Inf where the reference is finite",
    ), worst_err


def judge_trial(trial: int, ref_path: Path, cand_path: Path, cand_meta: list[dict], atol: float, rtol: float,
                device: str = "cpu") -> tuple[Mismatch | None, float]:
    """First mismatch of one trial (None if all outputs pass) and the largest absolute error seen."""
    expected, got = load_outputs(ref_path), load_outputs(cand_path)
    if len(expected) != len(got):
        return Mismatch(trial=trial, max_abs_err=float("inf"), max_rel_err=float("inf"), worst_index=[],
                        reason=f"{len(got)} outputs, expected {len(expected)}"), float("inf")
    worst = 0.0
    for exp, out, meta in zip(expected, got, cand_meta):
        structural = _structural(trial, exp, out, meta)
        if structural:
            return structural, structural.max_abs_err
        mismatch, err = compare_tensor(trial, exp, out, atol, rtol, device)
        if mismatch:
            return mismatch, err
        worst = max(worst, err)
    return None, worst
