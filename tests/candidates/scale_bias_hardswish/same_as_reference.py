"""The reference's own ops, called from C++: the same work as the reference, so the same time (issue 19)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SRC = """
#include <torch/extension.h>
torch::Tensor same(torch::Tensor x, torch::Tensor bias, double scale) {
    auto y = x * scale;
    y = y + bias;
    return y * torch::clamp(y + 3.0, 0.0, 6.0) / 6.0;
}
"""
_ext = load_inline("kforge_same_as_reference", cpp_sources=_SRC, functions=["same"])


class ModelNew(nn.Module):
    def __init__(self, dim: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return _ext.same(x, self.bias, self.scale)
