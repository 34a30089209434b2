"""Correct fused kernel that keeps a 4 MiB buffer alive per call (a growing cache): must be flagged `leak`."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>

torch::Tensor scale_bias_hardswish(torch::Tensor x, torch::Tensor bias, double scale) {
    TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == at::kFloat, "x must be a float32 CPU tensor");
    TORCH_CHECK(bias.scalar_type() == at::kFloat && x.dim() >= 1 && x.size(-1) == bias.numel(),
                "bias must be float32 and match the last dimension of x");
    x = x.contiguous();
    bias = bias.contiguous();
    auto y = torch::empty_like(x);
    const int64_t cols = bias.numel();
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
    const float* xp = x.data_ptr<float>();
    const float* bp = bias.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const float s = static_cast<float>(scale);
    // Split rows over threads, at least ~32K elements per task so small inputs stay serial.
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(cols, 1));
    at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            const float* xr = xp + r * cols;
            float* yr = yp + r * cols;
            // Branch-free body: -O3 vectorizes it. Same op order as eager, so results match.
            for (int64_t c = 0; c < cols; ++c) {
                const float v = xr[c] * s + bp[c];
                const float h = std::min(std::max(v + 3.0f, 0.0f), 6.0f);
                yr[c] = v * h / 6.0f;
            }
        }
    });
    return y;
}
"""

_ext = load_inline(
    name="kforge_test_leak_scale_bias_hardswish",
    cpp_sources=cpp_source,
    functions=["scale_bias_hardswish"],
    extra_cflags=["-O3", "-fopenmp"],  # at::parallel_for is an OpenMP pragma in a header
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, dim: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(dim))  # same RNG draw as Model, so same bias
        self.kept = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.kept.append(torch.ones(2**20))  # never released
        return _ext.scale_bias_hardswish(x, self.bias, self.scale)
