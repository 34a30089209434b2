"""AvgPool2d in Triton (stride = window, no padding): each program averages a block of output pixels (planes
flattened together), reading one window row per step as a [BLOCK, taps] tile."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def avg_pool_2d_kernel(x_ptr, y_ptr, n_out, height, width, out_h, out_w, KERNEL: tl.constexpr, TAPS: tl.constexpr,
                       BLOCK: tl.constexpr):
    outs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    plane, pixel = outs // (out_h * out_w), outs % (out_h * out_w)
    top, left = (pixel // out_w) * KERNEL, (pixel % out_w) * KERNEL
    taps = tl.arange(0, TAPS)
    mask = (outs[:, None] < n_out) & (taps[None, :] < KERNEL)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for dy in range(KERNEL):  # a loop, not unrolled: an 11-row window unrolled compiled for 25 s on a GPU
        base = plane * height * width + (top + dy) * width + left
        acc += tl.sum(tl.load(x_ptr + base[:, None] + taps[None, :], mask=mask, other=0.0), axis=1)
    tl.store(y_ptr + outs, acc / (KERNEL * KERNEL), mask=outs < n_out)


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int = None, padding: int = 0):
        super().__init__()
        assert stride in (None, kernel_size) and padding == 0, "this kernel pools non-overlapping windows only"
        self.kernel_size = kernel_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        batch, channels, height, width = x.shape
        out_h, out_w = height // self.kernel_size, width // self.kernel_size
        y = torch.empty((batch, channels, out_h, out_w), device=x.device, dtype=x.dtype)
        n_out = y.numel()
        taps = triton.next_power_of_2(self.kernel_size)
        avg_pool_2d_kernel[(triton.cdiv(n_out, 1024),)](x, y, n_out, height, width, out_h, out_w,
                                                        KERNEL=self.kernel_size, TAPS=taps, BLOCK=1024)
        return y
