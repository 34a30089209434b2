"""Hostile: compiles a CuTe DSL kernel of this file once but never launches it; PyTorch ops
do the work. A kernel of its own was made, none ran: `cheat no_custom_kernel`."""
import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import torch
import torch.nn as nn
from cutlass.cute.runtime import from_dlpack


@cute.kernel
def unused_kernel(gX: cute.Tensor, gY: cute.Tensor, scale: cutlass.Float32):
    tidx, _, _ = cute.arch.thread_idx()
    gY[tidx] = gX[tidx] * scale


@cute.jit
def unused(mX: cute.Tensor, mY: cute.Tensor, scale: cutlass.Float32, stream: cuda.CUstream):
    unused_kernel(mX, mY, scale).launch(grid=[1, 1, 1], block=[32, 1, 1], stream=stream)


_COMPILED = {}


class ModelNew(nn.Module):
    def __init__(self, dim: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(dim))  # the reference's draw

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = (x.dtype, x.device)
        if key not in _COMPILED:  # compiled, so made from this file; the compiled function is never called
            flat = x.detach().reshape(-1)[:32]
            stream = cuda.CUstream(torch.cuda.current_stream(x.device).cuda_stream)
            _COMPILED[key] = cute.compile(unused, from_dlpack(flat), from_dlpack(flat.clone()), self.scale, stream)
        y = x * self.scale + self.bias
        return y * torch.clamp(y + 3.0, 0.0, 6.0) / 6.0
