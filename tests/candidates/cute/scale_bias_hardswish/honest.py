"""x * scale + bias, then hardswish, fused in one CuTe DSL kernel (nvidia-cutlass-dsl 4.x): one thread per element,
one read and one write of it. Compiled once per shape and dtype with cute.compile, launched on torch's stream."""
import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import torch
import torch.nn as nn
from cutlass.cute.runtime import from_dlpack

THREADS = 256


@cute.kernel
def scale_bias_hardswish_kernel(gX: cute.Tensor, gB: cute.Tensor, gY: cute.Tensor, scale: cutlass.Float32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    bdim, _, _ = cute.arch.block_dim()
    i = bidx * bdim + tidx
    rows, cols = gX.shape
    if i < rows * cols:
        row = i // cols  # consecutive threads take consecutive columns of a row: coalesced
        col = i % cols
        v = gX[row, col].to(cutlass.Float32) * scale + gB[col].to(cutlass.Float32)
        h = cutlass.min(cutlass.max(v + 3.0, 0.0), 6.0)
        gY[row, col] = (v * h / 6.0).to(gY.element_type)


@cute.jit
def scale_bias_hardswish(mX: cute.Tensor, mB: cute.Tensor, mY: cute.Tensor, scale: cutlass.Float32,
                         stream: cuda.CUstream):
    rows, cols = mX.shape
    blocks = (rows * cols + THREADS - 1) // THREADS
    scale_bias_hardswish_kernel(mX, mB, mY, scale).launch(grid=[blocks, 1, 1], block=[THREADS, 1, 1], stream=stream)


_COMPILED = {}


def _cute(t: torch.Tensor) -> cute.Tensor:
    return from_dlpack(t.detach(), assumed_align=16)  # dlpack refuses a tensor that requires grad


class ModelNew(nn.Module):
    def __init__(self, dim: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(dim))  # the reference's draw

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        args = (_cute(x), _cute(self.bias), _cute(y), self.scale,
                cuda.CUstream(torch.cuda.current_stream(x.device).cuda_stream))
        key = (tuple(x.shape), x.dtype, x.device)
        if key not in _COMPILED:
            _COMPILED[key] = cute.compile(scale_bias_hardswish, *args)
        _COMPILED[key](*args)
        return y
