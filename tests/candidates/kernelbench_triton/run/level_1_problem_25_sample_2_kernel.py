"""Wrong on purpose, a dtype bug: the sigmoid is rounded to float16 before it scales x, so the output is off by
float16's rounding (up to ~2.4e-4 at outputs below 0.75), beyond the problem's 1e-4."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def swish_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    s = (1.0 / (1.0 + tl.exp(-x))).to(tl.float16)
    y = x * s.to(tl.float32)
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        swish_kernel[(triton.cdiv(n, 2048),)](x, y, n, BLOCK=2048)
        return y
