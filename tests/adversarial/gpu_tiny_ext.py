"""The CUDA twin of tiny_ext.py: one compiled ReLU shared by the GPU adversarial candidates (built once,
by the fixture `gpu_adversarial_build_root`).

Its kernel runs on torch's current stream, so a candidate can move it to a side stream."""

from tests.adversarial.prebuilt import load_shared

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

ext = load_shared("adversarial_tiny_ext_cuda", name="kforge_adversarial_relu_cuda", cpp_sources="torch::Tensor relu(torch::Tensor x);",
                  cuda_sources=SOURCE, functions=["relu"])
