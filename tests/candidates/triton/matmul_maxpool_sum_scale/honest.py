"""Linear, MaxPool1d(2) over the features, sum and scale fused in one Triton kernel: each program keeps a block of
rows and walks the output features in pairs (even and odd columns, each its own fp32 ieee dot), so the linear
layer's output never reaches memory."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def fused_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, K, pairs, scale, BLOCK_M: tl.constexpr, BLOCK_P: tl.constexpr,
                 BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    total = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for p0 in range(0, pairs, BLOCK_P):
        ps = p0 + tl.arange(0, BLOCK_P)
        even = tl.zeros((BLOCK_M, BLOCK_P), dtype=tl.float32)
        odd = tl.zeros((BLOCK_M, BLOCK_P), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)
            xmask = (rows[:, None] < M) & (ks[None, :] < K)
            x = tl.load(x_ptr + rows[:, None] * K + ks[None, :], mask=xmask, other=0.0)
            wmask = (ks[:, None] < K) & (ps[None, :] < pairs)
            even += tl.dot(x, tl.load(w_ptr + (2 * ps[None, :]) * K + ks[:, None], mask=wmask, other=0.0),
                           input_precision="ieee")
            odd += tl.dot(x, tl.load(w_ptr + (2 * ps[None, :] + 1) * K + ks[:, None], mask=wmask, other=0.0),
                          input_precision="ieee")
        even += tl.load(b_ptr + 2 * ps, mask=ps < pairs, other=0.0)[None, :]
        odd += tl.load(b_ptr + 2 * ps + 1, mask=ps < pairs, other=0.0)[None, :]
        total += tl.sum(tl.where(ps[None, :] < pairs, tl.maximum(even, odd), 0.0), axis=1)
    tl.store(y_ptr + rows, total * scale, mask=rows < M)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, kernel_size: int, scale_factor: float):
        super().__init__()
        assert kernel_size == 2, "pools feature pairs only"
        self.matmul = nn.Linear(in_features, out_features)  # the reference's weights
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, w = x.contiguous(), self.matmul.weight.contiguous()
        (M, K), pairs = x.shape, w.shape[0] // 2
        y = torch.empty((M,), device=x.device, dtype=x.dtype)
        fused_kernel[(triton.cdiv(M, 16),)](x, w, self.matmul.bias, y, M, K, pairs, self.scale_factor,
                                            BLOCK_M=16, BLOCK_P=64, BLOCK_K=32)
        return y
