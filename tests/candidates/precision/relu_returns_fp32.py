"""CPU candidate for relu that computes right but always returns float32, whatever dtype its input has."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor relu_fp32(torch::Tensor x) {
    auto xf = x.contiguous().to(torch::kFloat32);
    auto y = torch::empty_like(xf);
    const float* in = xf.data_ptr<float>();
    float* out = y.data_ptr<float>();
    for (int64_t i = 0, n = xf.numel(); i < n; ++i) out[i] = in[i] > 0.f ? in[i] : 0.f;
    return y;
}
"""

ext = load_inline(name="precision_relu_fp32", cpp_sources=cpp_source, functions=["relu_fp32"], extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_fp32(x)
