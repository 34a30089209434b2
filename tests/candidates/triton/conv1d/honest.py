"""Conv1d (stride 1, no padding, no bias) in Triton as an implicit GEMM: each program computes a tile of output
channels by output positions, reducing over (input channel, tap) pairs with an fp32 ieee dot."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def conv1d_kernel(x_ptr, w_ptr, y_ptr, c_in, c_out, length, out_length, KERNEL: tl.constexpr,
                  BLOCK_CO: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_L: tl.constexpr):
    batch = tl.program_id(0)
    cos = tl.program_id(1) * BLOCK_CO + tl.arange(0, BLOCK_CO)
    ls = tl.program_id(2) * BLOCK_L + tl.arange(0, BLOCK_L)
    acc = tl.zeros((BLOCK_CO, BLOCK_L), dtype=tl.float32)
    for r0 in range(0, c_in * KERNEL, BLOCK_R):
        rs = r0 + tl.arange(0, BLOCK_R)  # r = input channel * KERNEL + tap: the weight's own layout
        in_r = rs < c_in * KERNEL
        w = tl.load(w_ptr + cos[:, None] * c_in * KERNEL + rs[None, :], mask=(cos[:, None] < c_out) & in_r[None, :],
                    other=0.0)
        x_at = batch * c_in * length + (rs // KERNEL)[:, None] * length + ls[None, :] + (rs % KERNEL)[:, None]
        x = tl.load(x_ptr + x_at, mask=in_r[:, None] & (ls[None, :] < out_length), other=0.0)
        acc += tl.dot(w, x, input_precision="ieee")
    mask = (cos[:, None] < c_out) & (ls[None, :] < out_length)
    tl.store(y_ptr + batch * c_out * out_length + cos[:, None] * out_length + ls[None, :], acc, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 padding: int = 0, dilation: int = 1, groups: int = 1, bias: bool = False):
        super().__init__()
        assert (stride, padding, dilation, groups, bias) == (1, 0, 1, 1, False), "plain convolution only"
        self.conv1d = nn.Conv1d(in_channels, out_channels, kernel_size, bias=False)  # the reference's weights

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, w = x.contiguous(), self.conv1d.weight.contiguous()
        batch, c_in, length = x.shape
        c_out, _, kernel = w.shape
        out_length = length - kernel + 1
        y = torch.empty((batch, c_out, out_length), device=x.device, dtype=x.dtype)
        grid = (batch, triton.cdiv(c_out, 32), triton.cdiv(out_length, 512))
        conv1d_kernel[grid](x, w, y, c_in, c_out, length, out_length, KERNEL=kernel,
                            BLOCK_CO=32, BLOCK_R=32, BLOCK_L=512)
        return y
