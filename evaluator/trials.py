"""Stage 2 (in the child): build a model and run it on seeded inputs; outputs go to files for the parent to judge."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import torch


def as_tensors(value) -> list:
    """Normalise a forward() result to a list (a tensor, or a tuple/list of them)."""
    return list(value) if isinstance(value, (tuple, list)) else [value]


def make_inputs(problem: ModuleType, seed: int, device: str) -> list:
    """Inputs are created directly on the device, from a seed only the parent knows until now."""
    torch.manual_seed(seed)
    with torch.device(device):
        return list(problem.get_inputs())


def build_model(cls: type, problem: ModuleType, seed: int, device: str) -> torch.nn.Module:
    """Reference and candidate are built under the same seed, so same-shaped parameters get the same values."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = cls(*problem.get_init_inputs())
    return model.to(device).eval() if isinstance(model, torch.nn.Module) else model


def describe(value) -> dict:
    if not isinstance(value, torch.Tensor):
        return {"type": type(value).__name__}
    return {
        "type": type(value).__name__, "exact_tensor": type(value) is torch.Tensor, "shape": list(value.shape),
        "dtype": str(value.dtype), "device": value.device.type,
    }


_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_CHUNK = 2**26


def _bit_sum(t: torch.Tensor) -> int:
    """Exact checksum of the bit patterns, in chunks so a 17 GB input needs no 34 GB upcast copy."""
    flat = t.detach().reshape(-1)
    bits = flat.view(_BITS[flat.element_size()]) if flat.dtype != torch.bool else flat.to(torch.uint8)
    return sum(int(chunk.to(torch.int64).sum()) for chunk in bits.split(_CHUNK)) % 2**64


def fingerprint(tensors: list) -> list[int]:
    """Detects a candidate that writes into its inputs (any changed element changes the sum)."""
    return [_bit_sum(t) if isinstance(t, torch.Tensor) else 0 for t in tensors]


def save_outputs(outputs: list, path: Path) -> list[dict]:
    """Plain CPU copies, loadable with weights_only=True: nothing of the candidate's objects crosses over."""
    plain = [o.detach().to("cpu", copy=True).as_subclass(torch.Tensor).contiguous() if isinstance(o, torch.Tensor) else None for o in outputs]
    torch.save(plain, path)
    return [describe(o) for o in outputs]


def run_trials(model, problem: ModuleType, seeds: list[int], device: str, out_dir: Path, sync) -> list[dict]:
    """One call per seed; returns per-trial metadata (output description, input checksums before/after)."""
    report = []
    with torch.no_grad():
        for i, seed in enumerate(seeds):
            inputs = make_inputs(problem, seed, device)
            before = fingerprint(inputs)
            outputs = as_tensors(model(*inputs))
            sync()
            report.append({
                "outputs": save_outputs(outputs, out_dir / f"trial_{i}.pt"),
                "inputs_changed": fingerprint(inputs) != before,
                "max_input_numel": max((t.numel() for t in inputs if isinstance(t, torch.Tensor)), default=0),
            })
            del inputs, outputs
    return report
