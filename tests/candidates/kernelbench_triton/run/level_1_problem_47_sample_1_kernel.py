"""Sum over one dimension (keepdim) in Triton: the input seen as (outer, R, inner), each program owns a run of
`inner` columns of one outer index and walks the R rows in tiles, adding each tile's column sums to a float32
accumulator; reads are contiguous along `inner`."""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_kernel(x_ptr, y_ptr, R, inner, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    outer = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    rs = tl.arange(0, BLOCK_R)
    base = x_ptr + outer * R * inner
    acc = tl.zeros([BLOCK_I], tl.float32)
    for r0 in range(0, R, BLOCK_R):
        r = (r0 + rs).to(tl.int64)
        mask = (r[:, None] < R) & (cols[None, :] < inner)
        tile = tl.load(base + r[:, None] * inner + cols[None, :], mask=mask, other=0.0)
        acc += tl.sum(tile.to(tl.float32), axis=0)
    tl.store(y_ptr + outer * inner + cols, acc.to(y_ptr.dtype.element_ty), mask=cols < inner)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        dim = self.dim % x.dim()
        outer, R, inner = math.prod(x.shape[:dim]), x.shape[dim], math.prod(x.shape[dim + 1:])
        shape = list(x.shape)
        shape[dim] = 1
        y = torch.empty(shape, device=x.device, dtype=x.dtype)
        sum_kernel[(outer, triton.cdiv(inner, 128))](x, y, R, inner, BLOCK_R=32, BLOCK_I=128)
        return y
