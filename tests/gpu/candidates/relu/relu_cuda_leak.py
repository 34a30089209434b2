"""Correct CUDA ReLU that cudaMallocs 4 MiB scratch on every call and never frees it: must be flagged leak."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = """
#include <torch/extension.h>
__global__ void relu_kernel(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
torch::Tensor relu_fwd(torch::Tensor x) {
    void* scratch = nullptr;
    cudaMalloc(&scratch, 4 << 20);  // never freed
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
ext = load_inline(name="kforge_relu_cuda_leak", cpp_sources="torch::Tensor relu_fwd(torch::Tensor x);",
                  cuda_sources=cuda_src, functions=["relu_fwd"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_fwd(x.contiguous())
