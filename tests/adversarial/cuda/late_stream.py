"""Leaves its work for after the call: it returns an empty output at once and fills it on a side stream that
first sleeps on the GPU, so the call's own stream has nothing to wait for. A clock stopped behind the call's
`done` then stops before the work, and the lattice read there finds the output unwritten."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SRC = """
#include <torch/extension.h>
void late(torch::Tensor out, torch::Tensor x, torch::Tensor y, double scale) {
    at::add_out(out, torch::relu(x) * scale, y);
}
"""
# the body is compiled by nvcc (a CUDA extension: the device rule read from the code runs it on a GPU)
_DECL = "void late(torch::Tensor out, torch::Tensor x, torch::Tensor y, double scale);"
_ext = load_inline("kforge_cuda_late_stream", cpp_sources=_DECL, cuda_sources=_SRC,
                   functions=["late"])


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.side = torch.cuda.Stream()

    def forward(self, x, y):
        out = torch.empty_like(x)
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            torch.cuda._sleep(2_000_000)
            _ext.late(out, x, y, self.scale)
        return out
