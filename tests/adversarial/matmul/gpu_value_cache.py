"""Exploit 2 on a compute-bound problem (`correct` at 44.6x on an H100 before fresh inputs): a tiled
CUDA matmul whose result is cached on both inputs' addresses plus three sampled values of each. With new values
before every timed call it computes every time, and is timed at its own (modest) speed."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

constexpr int TILE = 32;

__global__ void matmul_kernel(const float* a, const float* b, float* c, int n) {
    __shared__ float sa[TILE][TILE];
    __shared__ float sb[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.f;
    for (int t = 0; t < n; t += TILE) {
        sa[threadIdx.y][threadIdx.x] = (row < n && t + threadIdx.x < n) ? a[(int64_t)row * n + t + threadIdx.x] : 0.f;
        sb[threadIdx.y][threadIdx.x] = (col < n && t + threadIdx.y < n) ? b[(int64_t)(t + threadIdx.y) * n + col] : 0.f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += sa[threadIdx.y][k] * sb[k][threadIdx.x];
        __syncthreads();
    }
    if (row < n && col < n) c[(int64_t)row * n + col] = acc;
}

torch::Tensor matmul(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda() && a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat,
                "float32 CUDA tensors are expected");
    TORCH_CHECK(a.dim() == 2 && a.size(0) == a.size(1) && b.sizes() == a.sizes(), "square matrices of one size are expected");
    auto ac = a.contiguous(), bc = b.contiguous();
    int n = static_cast<int>(ac.size(0));
    auto c = torch::empty_like(ac);
    dim3 block(TILE, TILE), grid((n + TILE - 1) / TILE, (n + TILE - 1) / TILE);
    matmul_kernel<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(ac.data_ptr<float>(), bc.data_ptr<float>(),
                                                                        c.data_ptr<float>(), n);
    return c;
}
"""

_ext = load_inline(name="kforge_adversarial_matmul_cache", cpp_sources="torch::Tensor matmul(torch::Tensor a, torch::Tensor b);",
                   cuda_sources=SOURCE, functions=["matmul"])


def _key(t: torch.Tensor) -> tuple:
    flat = t.view(-1)
    return (t.data_ptr(), *torch.stack([flat[0], flat[flat.numel() // 2], flat[-1]]).tolist())


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.key, self.answer = None, None

    def forward(self, A, B):
        key = (_key(A), _key(B))
        if key != self.key:
            self.key, self.answer = key, _ext.matmul(A, B)
        return self.answer
