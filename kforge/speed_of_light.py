"""Speed of light: the bytes and FLOPs a problem must move and do at full size, and the device peaks they
are judged against, so a report shows how far a kernel is from the hardware, not only from PyTorch.

Problems declare `bytes_moved` / `flops` in KFORGE_META; for the others (e.g. imported KernelBench files)
they are derived in a child process that builds the model and inputs on torch's meta device (shapes only,
no memory, no compute): bytes = inputs + parameters + outputs, FLOPs = torch's FlopCounterMode (matmuls
and convolutions only, so None for element-wise problems).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

from evaluator.hardware import peak
from reference_problems import Problem

DERIVE_TIMEOUT_S = 300.0


class Cost(NamedTuple):
    bytes_moved: int | None = None
    flops: int | None = None


class Achieved(NamedTuple):
    """What one timed run reached; fractions are None where the peak or the cost is unknown."""

    bytes_per_s: float | None
    flops_per_s: float | None
    bandwidth_fraction: float | None
    flops_fraction: float | None


def achieved(cost: Cost, seconds: float, device_name: str) -> Achieved:
    bw = cost.bytes_moved / seconds if cost.bytes_moved else None
    fl = cost.flops / seconds if cost.flops else None
    device_peak = peak(device_name)
    if device_peak is None:
        return Achieved(bw, fl, None, None)
    return Achieved(bw, fl, bw and bw / device_peak.bytes_per_s, fl and fl / device_peak.flops_per_s)


def costs(problems: list[Problem]) -> dict[str, Cost]:
    """Per problem name: declared values, with the missing ones derived (one child for all problems)."""
    todo = [p for p in problems if p.meta.bytes_moved is None or p.meta.flops is None]
    derived = derive([p.path for p in todo]) if todo else {}
    result = {}
    for p in problems:
        guess = derived.get(str(p.path), Cost())
        result[p.name] = Cost(p.meta.bytes_moved or guess.bytes_moved, p.meta.flops or guess.flops)
    return result


def derive(paths: list[Path]) -> dict[str, Cost]:
    """Runs the problem files in a child process (the parent never executes problem code); a file that
    fails, or a child that hangs, yields no entry rather than an error: the report just omits the numbers."""
    with tempfile.TemporaryDirectory(prefix="kforge-sol-") as tmp:
        out = Path(tmp) / "costs.json"
        cmd = [sys.executable, "-m", "kforge.speed_of_light", str(out), *map(str, paths)]
        try:
            subprocess.run(cmd, cwd=tmp, timeout=DERIVE_TIMEOUT_S, stdin=subprocess.DEVNULL, capture_output=True)
        except subprocess.TimeoutExpired:
            return {}
        found = json.loads(out.read_text()) if out.is_file() else {}
    return {path: Cost(**c) for path, c in found.items()}


def _measure(path: str) -> dict[str, int | None]:
    """Child side: one forward pass on meta tensors, at the file's own (full) size."""
    import runpy

    import torch
    from torch.utils._pytree import tree_leaves
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        ns = runpy.run_path(path)
        model, inputs = ns["Model"](*ns["get_init_inputs"]()), ns["get_inputs"]()
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            outputs = model(*inputs)
    tensors = [*tree_leaves(inputs), *model.parameters(), *model.buffers(), *tree_leaves(outputs)]
    nbytes = sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))
    return {"bytes_moved": nbytes or None, "flops": counter.get_total_flops() or None}


def _child(out: str, paths: list[str]) -> None:
    found = {}
    for path in paths:
        try:
            found[path] = _measure(path)
        except Exception:  # noqa: BLE001 - any failure of a problem file just means "not derived"
            continue
    Path(out).write_text(json.dumps(found))


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2:])
