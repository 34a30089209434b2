"""x * scale + bias, then hardswish, in one Triton pass: one read and one write per element."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_bias_hardswish_kernel(x_ptr, b_ptr, y_ptr, n, cols, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x_ptr + offs, mask=mask) * scale + tl.load(b_ptr + offs % cols, mask=mask)
    h = tl.minimum(tl.maximum(v + 3.0, 0.0), 6.0)
    tl.store(y_ptr + offs, v * h / 6.0, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(dim))  # the reference's draw

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 4096),)
        scale_bias_hardswish_kernel[grid](x, self.bias, y, n, self.bias.numel(), self.scale, BLOCK=4096)
        return y
