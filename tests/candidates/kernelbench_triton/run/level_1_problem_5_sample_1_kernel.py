"""A * s in Triton: one flat pass; the scalar s is a kernel argument, so a new s needs no recompile."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(a_ptr, c_ptr, s, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask)
    tl.store(c_ptr + offs, (a * s).to(c_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def forward(self, A: torch.Tensor, s: float) -> torch.Tensor:
        A = A.contiguous()
        C = torch.empty_like(A)
        n = A.numel()
        scale_kernel[(triton.cdiv(n, 2048),)](A, C, s, n, BLOCK=2048)
        return C
