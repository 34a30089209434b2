"""Judging outputs in the comparer (the reference child, which no candidate touched), on the raw bytes or the device
memory the harness handed over: the candidate's process has no say in the comparison."""

from __future__ import annotations

import math
import mmap
import os
from typing import NamedTuple

import torch

from evaluator.contracts import Mismatch
from evaluator.sandbox.results import open_regular


class Comparison(NamedTuple):
    mismatch: Mismatch | None  # None: every element within tolerance
    max_abs_err: float
    tolerance_used: float  # max |got - exp| / (atol + rtol * |exp|): 1.0 is the limit


def layout(meta: dict) -> tuple[torch.dtype, list[int], int] | None:
    """(dtype, shape, bytes) of one described output; None where the harness saved no tensor."""
    if not meta.get("exact_tensor"):
        return None
    dtype = getattr(torch, str(meta["dtype"]).removeprefix("torch."), None)
    shape = [int(n) for n in meta["shape"]]
    if not isinstance(dtype, torch.dtype) or min(shape, default=0) < 0:
        raise ValueError(f"an output described as {meta['dtype']} {shape}")
    return dtype, shape, math.prod(shape) * dtype.itemsize


def load_outputs(path: str, metas: list[dict]) -> list:
    """Tensors over a private mapping of a child's raw output file, laid out as `metas` (the descriptions the
    harness sent) say: a multi-GB output is read page by page as it is compared, never parsed or copied first.
    OSError if it is not a regular file of exactly that size (a rewritten file, a FIFO, a link: open_regular)."""
    layouts = [layout(m) for m in metas]
    size = sum(lay[2] for lay in layouts if lay)
    fd = open_regular(path, size)
    try:
        pages = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE) if size else b""
    finally:
        os.close(fd)  # the mapping holds the file
    tensors, offset = [], 0
    for lay in layouts:
        if lay is None:
            tensors.append(None)
            continue
        dtype, shape, nbytes = lay
        flat = torch.frombuffer(pages, dtype=dtype, count=nbytes // dtype.itemsize, offset=offset) if nbytes else torch.empty(0, dtype=dtype)
        tensors.append(flat.view(shape))
        offset += nbytes
    return tensors


def _structural(expected: torch.Tensor, expected_meta: dict, meta: dict) -> str:
    """Shape, dtype, device and type must match exactly; broadcasting or casting never rescues an output."""
    if not meta.get("exact_tensor", False):
        return f"forward returned {meta.get('type')}, not a plain torch.Tensor"
    if list(expected.shape) != meta["shape"]:
        return f"shape {tuple(meta['shape'])} != expected {tuple(expected.shape)}"
    if str(expected.dtype) != meta["dtype"]:
        return f"dtype {meta['dtype']} != expected {expected.dtype}"
    if expected_meta.get("device", meta["device"]) != meta["device"]:
        return f"device {meta['device']} != expected {expected_meta['device']}"
    return ""


_CHUNK = 2**24  # elements compared at a time: the temporaries stay small for multi-GB outputs
_NARROW = (torch.float32, torch.float16, torch.bfloat16)  # judged in float32: allclose's own precision for float32


def _working(dtype: torch.dtype) -> torch.dtype:
    """float32 for floats of 32 bits or fewer, float64 for the rest (float64, and integers past 2**24). Judging
    float32 in float64 read and wrote twice the bytes: 8 comparisons of a 6.4 GB output took ~1 s of every
    level-1 candidate's 4 s on the H100. In float32 |got - exp| is exact for close values (Sterbenz) and the
    bound is off by at most an ulp: a verdict could only move for an error within 1e-7 of the tolerance."""
    return torch.float32 if dtype in _NARROW else torch.float64


def _chunk_errors(exp: torch.Tensor, out: torch.Tensor, atol: float, rtol: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Absolute error (NaN -> inf), its ratio to the allowed error, and the failure mask of one chunk. The mask
    is taken from the ratio with NaN as inf: an infinite error against an infinite reference (0 where the
    reference is inf) is inf / inf, and a NaN is greater than nothing; before, such an output passed."""
    work = _working(exp.dtype)
    exp, out = exp.to(work), out.to(work)
    both_nan = exp.isnan() & out.isnan()
    inf = float("inf")  # nan_to_num's default turns inf into the largest finite value: an inf error passed as 3e38
    err = (out - exp).abs().nan_to_num(nan=inf, posinf=inf).masked_fill(both_nan | (exp == out), 0.0)
    ratio = (err / (atol + rtol * exp.abs())).masked_fill(err == 0, 0.0).nan_to_num(nan=inf, posinf=inf)
    return err, ratio, ratio > 1


def _maxima(exp: torch.Tensor, out: torch.Tensor, atol: float, rtol: float) -> torch.Tensor:
    """max |got - exp| and max of its ratio to the allowed error in one chunk, as a 2-element tensor left on the
    device: where both are finite and the ratio at most 1 they are _chunk_errors' own maxima (every value finite,
    the allowed error above 0, so its masks change nothing) from a third of its passes over memory."""
    work = _working(exp.dtype)
    exp, out = exp.to(work), out.to(work)
    err = (out - exp).abs_()
    return torch.stack([err.max(), (err / (atol + rtol * exp.abs())).max()])


def compare_tensor(trial: int, expected: torch.Tensor, got: torch.Tensor, atol: float, rtol: float,
                   device: str = "cpu") -> Comparison:
    """allclose semantics (|got-exp| <= atol + rtol*|exp|); NaN/Inf pass only where the reference has the same.

    Works chunk by chunk on `device` (the GPU when there is one): each chunk's maxima first, with one host sync
    for them all, then _chunk_errors on the chunks they cannot settle (a value not finite, or beyond tolerance).
    """
    exp_flat, out_flat = expected.reshape(-1), got.reshape(-1)
    starts = range(0, exp_flat.numel(), _CHUNK)
    piece = lambda flat, start: flat[start:start + _CHUNK].to(device)  # noqa: E731
    quick = [_maxima(piece(exp_flat, start), piece(out_flat, start), atol, rtol) for start in starts]
    n_bad, worst_err, worst_ratio, worst_at, worst_bad_err, max_rel = 0, 0.0, 0.0, 0, -1.0, 0.0
    for start, (chunk_err, chunk_ratio) in zip(starts, torch.stack(quick).double().tolist() if quick else []):
        if not (math.isfinite(chunk_err) and chunk_ratio <= 1):  # NaN fails the comparison too
            exp, out = piece(exp_flat, start), piece(out_flat, start)
            err, ratio, bad = _chunk_errors(exp, out, atol, rtol)
            chunk_err, chunk_ratio, n = torch.stack([err.max().double(), ratio.max().double(), bad.sum().double()]).tolist()
            if n:
                n_bad += int(n)
                max_rel = max(max_rel, float((err / exp.to(err.dtype).abs().clamp_min(1e-12))[bad].max()))
                at = int(torch.argmax(torch.where(bad, err, -1.0)))
                if float(err[at]) > worst_bad_err:
                    worst_bad_err, worst_at = float(err[at]), start + at
        worst_err, worst_ratio = max(worst_err, chunk_err), max(worst_ratio, chunk_ratio)
    if n_bad == 0:
        return Comparison(None, worst_err, worst_ratio)
    index = [int(i) for i in torch.unravel_index(torch.tensor(worst_at), expected.shape)] if expected.dim() else []
    got_value = float(out_flat[worst_at])
    return Comparison(Mismatch(
        trial=trial, max_abs_err=worst_err, max_rel_err=max_rel, worst_index=index,
        expected=float(exp_flat[worst_at]), got=got_value, bad_fraction=n_bad / max(1, exp_flat.numel()),
        reason="values differ beyond tolerance" if math.isfinite(got_value) else "NaN/Inf where the reference is finite",
    ), worst_err, worst_ratio)


def _fail(trial: int, reason: str) -> Comparison:
    inf = float("inf")
    return Comparison(Mismatch(trial=trial, max_abs_err=inf, max_rel_err=inf, worst_index=[], reason=reason), inf, inf)


def judge_outputs(trial: int, expected: list, expected_meta: list[dict], got: list, meta: list[dict],
                  atol: float, rtol: float, device: str = "cpu") -> Comparison:
    """First mismatch of one call's outputs (None if all pass), with the worst errors seen."""
    if len(expected) != len(got):
        return _fail(trial, f"{len(got)} outputs, expected {len(expected)}")
    worst, ratio = 0.0, 0.0
    for exp, exp_meta, out, out_meta in zip(expected, expected_meta, got, meta):
        reason = _structural(exp, exp_meta, out_meta)
        if reason:
            return _fail(trial, reason)
        result = compare_tensor(trial, exp, out, atol, rtol, device)
        if result.mismatch:
            return result
        worst, ratio = max(worst, result.max_abs_err), max(ratio, result.tolerance_used)
    return Comparison(None, worst, ratio)
