"""An honest fused C++ kernel for relu(x) * scale + y: one pass over both inputs."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor relu_scale_add(torch::Tensor x, torch::Tensor y, double scale) {
    TORCH_CHECK(x.is_cpu() && x.scalar_type() == at::kFloat && y.sizes() == x.sizes(), "two float32 CPU tensors");
    auto xc = x.contiguous(), yc = y.contiguous();
    auto out = torch::empty_like(xc);
    const float* a = xc.data_ptr<float>();
    const float* b = yc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    const float s = static_cast<float>(scale);
    for (int64_t i = 0; i < xc.numel(); ++i) o[i] = (a[i] > 0.f ? a[i] : 0.f) * s + b[i];
    return out;
}
"""

ext = load_inline(name="relu_scale_add_honest", cpp_sources=cpp_source, functions=["relu_scale_add"],
                  extra_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return ext.relu_scale_add(x, y, self.scale)
