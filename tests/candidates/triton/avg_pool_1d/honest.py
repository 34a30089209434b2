"""AvgPool1d in Triton: each program averages a block of outputs (rows flattened together), reading every window
as one [BLOCK, taps] tile; padded taps count as zeros (count_include_pad, PyTorch's default)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def avg_pool_1d_kernel(x_ptr, y_ptr, n_out, length, out_length, stride, padding, KERNEL: tl.constexpr,
                       TAPS: tl.constexpr, BLOCK: tl.constexpr):
    outs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    row, col = outs // out_length, outs % out_length
    taps = tl.arange(0, TAPS)
    pos = col[:, None] * stride - padding + taps[None, :]
    mask = (outs[:, None] < n_out) & (taps[None, :] < KERNEL) & (pos >= 0) & (pos < length)
    window = tl.load(x_ptr + row[:, None] * length + pos, mask=mask, other=0.0)
    tl.store(y_ptr + outs, tl.sum(window, axis=1) / KERNEL, mask=outs < n_out)


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int = 1, padding: int = 0):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        batch, channels, length = x.shape
        out_length = (length + 2 * self.padding - self.kernel_size) // self.stride + 1
        y = torch.empty((batch, channels, out_length), device=x.device, dtype=x.dtype)
        n_out = y.numel()
        avg_pool_1d_kernel[(triton.cdiv(n_out, 4096),)](x, y, n_out, length, out_length, self.stride, self.padding,
                                                        KERNEL=self.kernel_size,
                                                        TAPS=triton.next_power_of_2(self.kernel_size), BLOCK=4096)
        return y
