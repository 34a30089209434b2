"""x * scale + bias, then hardswish, fused in one TileLang kernel (tilelang 0.1.x): each block of threads takes a
BLOCK_M x BLOCK_N tile, one read and one write of each element. Compiled by tilelang.jit once per shape and dtype."""
import tilelang
import tilelang.language as T
import torch
import torch.nn as nn

BLOCK_M, BLOCK_N, THREADS = 8, 512, 256


@tilelang.jit(out_idx=[-1])  # the last tensor is the output: the compiled kernel allocates and returns it
def scale_bias_hardswish(rows: int, cols: int, scale: float, dtype: str):
    @T.prim_func
    def kernel(X: T.Tensor((rows, cols), dtype), B: T.Tensor((cols,), dtype), Y: T.Tensor((rows, cols), dtype)):
        with T.Kernel(T.ceildiv(cols, BLOCK_N), T.ceildiv(rows, BLOCK_M), threads=THREADS) as (bx, by):
            for i, j in T.Parallel(BLOCK_M, BLOCK_N):  # j, the contiguous column, varies fastest: coalesced
                row = by * BLOCK_M + i
                col = bx * BLOCK_N + j
                if row < rows and col < cols:
                    v = T.Cast("float32", X[row, col]) * scale + T.Cast("float32", B[col])
                    Y[row, col] = T.Cast(dtype, v * T.clamp(v + 3.0, 0.0, 6.0) / 6.0)

    return kernel


class ModelNew(nn.Module):
    def __init__(self, dim: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(dim))  # the reference's draw

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        kernel = scale_bias_hardswish(rows, cols, float(self.scale), str(x.dtype).removeprefix("torch."))
        return kernel(x, self.bias.detach())  # dlpack refuses a tensor that requires grad
