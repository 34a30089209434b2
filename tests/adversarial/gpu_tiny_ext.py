"""The CUDA twin of tiny_ext.py: one compiled ReLU shared by the GPU adversarial candidates (built once).

Its kernel runs on torch's current stream, so a candidate can move it to a side stream."""

import os
from pathlib import Path

from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void relu_kernel(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

torch::Tensor relu(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat, "a float32 CUDA tensor is expected");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    int64_t n = xc.numel();
    relu_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

# the jail lets a child write only its own build dir and the build root's shared pch/ folder: the test kernel lives there
BUILD_DIR = Path(os.environ["TORCH_EXTENSIONS_DIR"]).parent / "pch" / "adversarial_tiny_ext_cuda"
BUILD_DIR.mkdir(exist_ok=True)
ext = load_inline(name="kforge_adversarial_relu_cuda", cpp_sources="torch::Tensor relu(torch::Tensor x);",
                  cuda_sources=SOURCE, functions=["relu"], build_directory=str(BUILD_DIR))
