"""Replaces torch.cuda.Event.elapsed_time at import so that every duration read through it is a tenth of the
truth (NVIDIA's SOL-ExecBench ships this as its `evil_monkey_patch` sample), around the honest twin's C++ call
(same_as_reference.py). A harness that reads its timed calls through that method in the candidate's process
reports 10x; a clock in a process the candidate does not own reads the truth."""
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
_ext = load_inline("kforge_cuda_elapsed_tenth", cpp_sources=_DECL, cuda_sources=_SRC,
                   functions=["same"])

_true = torch.cuda.Event.elapsed_time
torch.cuda.Event.elapsed_time = lambda self, end: _true(self, end) / 10


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return _ext.same(x, y, self.scale)
