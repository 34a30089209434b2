"""CPU candidate for softmax: row-wise softmax over the last dimension, rows split across threads."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <cmath>
#include <limits>

torch::Tensor softmax_lastdim(torch::Tensor x) {
    TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == at::kFloat, "x must be a float32 CPU tensor");
    TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension");
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int64_t cols = x.size(-1);
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            const float* xr = xp + r * cols;
            float* yr = yp + r * cols;
            // Subtract the row max so exp never overflows; sum in double to keep the
            // long reduction accurate.
            float m = -std::numeric_limits<float>::infinity();
            for (int64_t c = 0; c < cols; ++c) m = std::max(m, xr[c]);
            double sum = 0.0;
            for (int64_t c = 0; c < cols; ++c) {
                yr[c] = std::exp(xr[c] - m);
                sum += yr[c];
            }
            const float inv = static_cast<float>(1.0 / sum);
            for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
        }
    });
    return y;
}
"""

_ext = load_inline(
    name="kforge_cpu_softmax_o3",
    cpp_sources=cpp_source,
    functions=["softmax_lastdim"],
    extra_cflags=["-O3", "-fopenmp"],  # at::parallel_for is an OpenMP pragma in a header
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.softmax_lastdim(x)
