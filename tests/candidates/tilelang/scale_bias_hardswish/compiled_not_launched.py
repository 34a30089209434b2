"""Hostile: compiles a TileLang kernel of this file but never launches it; PyTorch ops
do the work. A kernel of its own was made, none ran: `cheat no_custom_kernel`."""
import tilelang
import tilelang.language as T
import torch
import torch.nn as nn


@tilelang.jit(out_idx=[-1])
def copy(rows: int, cols: int, dtype: str):
    @T.prim_func
    def kernel(X: T.Tensor((rows, cols), dtype), Y: T.Tensor((rows, cols), dtype)):
        with T.Kernel(T.ceildiv(cols, 256), rows, threads=256) as (bx, by):
            for j in T.Parallel(256):
                if bx * 256 + j < cols:
                    Y[by, bx * 256 + j] = X[by, bx * 256 + j]

    return kernel


class ModelNew(nn.Module):
    def __init__(self, dim: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(dim))  # the reference's draw

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        copy(*x.shape, str(x.dtype).removeprefix("torch."))  # compiled (cached after the first call), never launched
        y = x * self.scale + self.bias
        return y * torch.clamp(y + 3.0, 0.0, 6.0) / 6.0
