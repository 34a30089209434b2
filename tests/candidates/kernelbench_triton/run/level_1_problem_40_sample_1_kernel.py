"""LayerNorm over the trailing normalized_shape in Triton, for rows of millions of values (16 rows of 4,194,304
at the full size) that no single program should walk alone: (1) each program takes one chunk of a row and writes
its mean and sum of squared deviations, (2) one program per row merges its chunks' statistics (Chan's parallel
formula: no cancellation), (3) each program normalizes one chunk with the row's mean and 1/std and applies the
weight and bias. Statistics in float32; the output in the input's dtype."""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def chunk_stats_kernel(x_ptr, mean_ptr, m2_ptr, N, CHUNKS, BLOCK: tl.constexpr):
    row, chunk = tl.program_id(0).to(tl.int64), tl.program_id(1)
    cols = chunk * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    count = tl.minimum(N - chunk * BLOCK, BLOCK).to(tl.float32)
    mean = tl.sum(x, axis=0) / count
    m2 = tl.sum(tl.where(mask, (x - mean) * (x - mean), 0.0), axis=0)
    tl.store(mean_ptr + row * CHUNKS + chunk, mean)
    tl.store(m2_ptr + row * CHUNKS + chunk, m2)


@triton.jit
def row_stats_kernel(mean_ptr, m2_ptr, row_mean_ptr, row_rstd_ptr, N, CHUNKS, eps, BLOCK: tl.constexpr,
                     CBLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    ids = tl.arange(0, CBLOCK)
    total = tl.zeros([CBLOCK], tl.float32)
    for c0 in range(0, CHUNKS, CBLOCK):
        c = c0 + ids
        mask = c < CHUNKS
        count = tl.where(mask, tl.minimum(N - c * BLOCK, BLOCK), 0).to(tl.float32)
        total += count * tl.load(mean_ptr + row * CHUNKS + c, mask=mask, other=0.0)
    mean = tl.sum(total, axis=0) / N
    spread = tl.zeros([CBLOCK], tl.float32)
    for c0 in range(0, CHUNKS, CBLOCK):
        c = c0 + ids
        mask = c < CHUNKS
        count = tl.where(mask, tl.minimum(N - c * BLOCK, BLOCK), 0).to(tl.float32)
        d = tl.load(mean_ptr + row * CHUNKS + c, mask=mask, other=0.0) - mean
        spread += tl.load(m2_ptr + row * CHUNKS + c, mask=mask, other=0.0) + count * d * d
    var = tl.sum(spread, axis=0) / N
    tl.store(row_mean_ptr + row, mean)
    tl.store(row_rstd_ptr + row, 1.0 / tl.sqrt(var + eps))


@triton.jit
def normalize_kernel(x_ptr, w_ptr, b_ptr, y_ptr, row_mean_ptr, row_rstd_ptr, N, BLOCK: tl.constexpr):
    row, chunk = tl.program_id(0).to(tl.int64), tl.program_id(1)
    cols = chunk * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = (x - tl.load(row_mean_ptr + row)) * tl.load(row_rstd_ptr + row) * w + b
    tl.store(y_ptr + row * N + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    """Holds an nn.LayerNorm for its parameters (the reference's weight and bias); forward never calls it."""

    BLOCK = 4096

    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        N = math.prod(self.ln.normalized_shape)
        rows, chunks = x.numel() // N, triton.cdiv(N, self.BLOCK)
        means = torch.empty((rows, chunks), device=x.device, dtype=torch.float32)
        m2s = torch.empty_like(means)
        row_mean = torch.empty(rows, device=x.device, dtype=torch.float32)
        row_rstd = torch.empty_like(row_mean)
        y = torch.empty_like(x)
        chunk_stats_kernel[(rows, chunks)](x, means, m2s, N, chunks, BLOCK=self.BLOCK, num_warps=8)
        row_stats_kernel[(rows,)](means, m2s, row_mean, row_rstd, N, chunks, self.ln.eps, BLOCK=self.BLOCK, CBLOCK=1024)
        normalize_kernel[(rows, chunks)](x, self.ln.weight, self.ln.bias, y, row_mean, row_rstd, N, BLOCK=self.BLOCK,
                                         num_warps=8)
        return y
