"""Hostile: the @triton.jit body calls a plain Python function that does the work with torch. Triton's interpreter
(CPU) runs the body as Python, so the outputs are right there; a GPU compile rejects the call."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

_TENSORS = {}


def _relu_in_torch():
    _TENSORS["y"].copy_(torch.relu(_TENSORS["x"]))


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    _relu_in_torch()


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        _TENSORS.update(x=x, y=y)
        relu_kernel[(1,)](x, y, x.numel(), BLOCK=1024)
        return y
