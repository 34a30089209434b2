"""CPU candidate for scale_bias_hardswish that compiles but DELIBERATELY FAILS IN forward().

The kernel wrongly insists on a 3-D (batch, seq, dim) input; the problem's input is 2-D, so the
TORCH_CHECK throws (a RuntimeError in Python) on every call.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <algorithm>

torch::Tensor scale_bias_hardswish(torch::Tensor x, torch::Tensor bias, double scale) {
    TORCH_CHECK(x.dim() == 3, "expected a (batch, seq, dim) input, got ", x.dim(), " dims");
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const int64_t cols = bias.numel();
    const float* xp = x.data_ptr<float>();
    const float* bp = bias.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const float s = static_cast<float>(scale);
    for (int64_t i = 0; i < x.numel(); ++i) {
        const float v = xp[i] * s + bp[i % cols];
        yp[i] = v * std::min(std::max(v + 3.0f, 0.0f), 6.0f) / 6.0f;
    }
    return y;
}
"""

_ext = load_inline(
    name="kforge_cpu_runtime_error_scale_bias_hardswish",
    cpp_sources=cpp_source,
    functions=["scale_bias_hardswish"],
    extra_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, dim: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.scale_bias_hardswish(x, self.bias, self.scale)
