"""The honest twin of the CUDA attacks here: relu-scale-add as the reference computes it, its ops called from
C++ (an extension of its own, so no rule read from the code calls it kernel-less), each temporary freed where
Python frees the reference's."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SRC = """
#include <torch/extension.h>
torch::Tensor same(torch::Tensor x, torch::Tensor y, double scale) {
    torch::Tensor r = torch::relu(x);
    r = r * scale;
    return r + y;
}
"""
# the body is compiled by nvcc (a CUDA extension: the device rule read from the code runs it on a GPU)
_DECL = "torch::Tensor same(torch::Tensor x, torch::Tensor y, double scale);"
_ext = load_inline("kforge_cuda_same_as_reference", cpp_sources=_DECL, cuda_sources=_SRC,
                   functions=["same"])


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return _ext.same(x, y, self.scale)
