"""An honest CUDA kernel for relu(x) * scale + y that waits for the GPU inside its forward (a synchronize after
the launch, as many generated kernels do to check it): a forward server cannot queue its call before the GPU ran
it, so its head is let run and its window holds its host's time too."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_BODY = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void rsa(const float* x, const float* y, float* out, float s, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = fmaxf(x[i], 0.f) * s + y[i];
}

torch::Tensor run(torch::Tensor x, torch::Tensor y, double scale) {
    auto out = torch::empty_like(x);
    rsa<<<1024, 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(),
                                                            out.data_ptr<float>(), (float)scale, x.numel());
    return out;
}
"""
_DECL = "torch::Tensor run(torch::Tensor x, torch::Tensor y, double scale);"
_ext = load_inline("relu_scale_add_cuda_synchronized", cpp_sources=_DECL, cuda_sources=_BODY, functions=["run"])


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        out = _ext.run(x.contiguous(), y.contiguous(), self.scale)
        torch.cuda.synchronize()
        return out
