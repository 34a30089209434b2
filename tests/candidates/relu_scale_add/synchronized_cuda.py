"""The honest fused CUDA kernel of honest_cuda.py, which waits for the GPU inside its forward (a synchronize after
the launch, as many generated kernels do to check their launch): a forward server cannot queue its call before
the GPU ran it, so its head is let run and its window holds its host's time too."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

__global__ void relu_scale_add_kernel(const float4* __restrict__ x, const float4* __restrict__ y,
                                      float4* __restrict__ out, float s, int64_t n4) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n4) return;
    float4 a = x[i], b = y[i];
    out[i] = make_float4(fmaxf(a.x, 0.f) * s + b.x, fmaxf(a.y, 0.f) * s + b.y,
                         fmaxf(a.z, 0.f) * s + b.z, fmaxf(a.w, 0.f) * s + b.w);
}

torch::Tensor relu_scale_add(torch::Tensor x, torch::Tensor y, double scale) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat && y.sizes() == x.sizes(), "two float32 CUDA tensors");
    auto xc = x.contiguous(), yc = y.contiguous();
    TORCH_CHECK(xc.numel() % 4 == 0, "a multiple of four elements");
    auto out = torch::empty_like(xc);
    int64_t n4 = xc.numel() / 4;
    int threads = 256;
    int64_t blocks = (n4 + threads - 1) / threads;
    relu_scale_add_kernel<<<blocks, threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const float4*>(xc.data_ptr<float>()), reinterpret_cast<const float4*>(yc.data_ptr<float>()),
        reinterpret_cast<float4*>(out.data_ptr<float>()), static_cast<float>(scale), n4);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""
cpp_source = "torch::Tensor relu_scale_add(torch::Tensor x, torch::Tensor y, double scale);"

ext = load_inline(name="relu_scale_add_cuda_synchronized", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["relu_scale_add"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        out = ext.relu_scale_add(x, y, self.scale)
        torch.cuda.synchronize()
        return out
