"""The child's side of problem introspection (evaluator/parent/introspect.py): one forward pass of a problem file
on torch's meta device, for the bytes it moves and the FLOPs it does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode

from evaluator.child import trials
from evaluator.child.loading import load_problem
from evaluator.protocol import Measured


def countable(inputs: list) -> bool:
    """Whether a call's FLOPs bound its time: not for inputs narrower than 16 bits, where the floor's 16-bit peak
    would not bound the arithmetic."""
    return not any(isinstance(t, torch.Tensor) and t.is_floating_point() and torch.finfo(t.dtype).bits < 16 for t in inputs)


def measure(path: str, overrides: dict[str, Any]) -> Measured:
    """Child side: one forward pass of the file's Model on meta tensors, resized by `overrides` and cast to the
    child's precision as a run casts them (trials.cast); any failure of the file is its answer."""
    try:
        with torch.device("meta"):
            problem = load_problem(Path(path), overrides)
            model = problem.Model(*map(trials.cast, problem.get_init_inputs()))
            model = model if trials.dtype is torch.float32 else model.to(dtype=trials.dtype)
            inputs = [trials.cast(v) for v in problem.get_inputs()]
            with torch.no_grad(), FlopCounterMode(display=False) as counter:
                outputs = model(*inputs)
        tensors = [*tree_leaves(inputs), *model.parameters(), *model.buffers(), *tree_leaves(outputs)]
        nbytes = sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))
    except Exception as exc:  # noqa: BLE001 - a failing problem file is an answer, not the end of the child
        return Measured(which=path, error=f"{type(exc).__name__}: {str(exc).strip()[:300]}")
    flops = counter.get_total_flops() if countable(inputs) else 0
    return Measured(which=path, bytes_moved=nbytes or None, flops=flops or None)
