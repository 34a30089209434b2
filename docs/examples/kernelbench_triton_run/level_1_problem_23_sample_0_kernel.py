"""Softmax over dim 1 in Triton, one program per row, for rows longer than a block: a first pass keeps a running
max and sum of exponentials per lane, a second writes exp(x - max) / sum. Computed in float32."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * n_cols
    offs = tl.arange(0, BLOCK)
    run_max = tl.full((BLOCK,), float("-inf"), tl.float32)
    run_sum = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        mask = start + offs < n_cols
        x = tl.load(x_ptr + row + start + offs, mask=mask, other=float("-inf")).to(tl.float32)
        new_max = tl.maximum(run_max, x)
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)  # a lane that read only padding keeps a zero sum
        run_sum = run_sum * tl.exp(run_max - shift) + tl.exp(x - shift)
        run_max = new_max
    row_max = tl.max(run_max, axis=0)
    row_sum = tl.sum(run_sum * tl.exp(run_max - row_max), axis=0)
    for start in range(0, n_cols, BLOCK):
        mask = start + offs < n_cols
        x = tl.load(x_ptr + row + start + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row + start + offs, tl.exp(x - row_max) / row_sum, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        rows, n_cols = x.shape
        softmax_kernel[(rows,)](x, y, n_cols, BLOCK=1024)
        return y
