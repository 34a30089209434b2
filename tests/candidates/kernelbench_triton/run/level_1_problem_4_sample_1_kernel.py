"""Matrix-vector product in Triton: one program per row of A (2,048 rows of 1,048,576 values at the full size)
walks the row in blocks, multiplying by the matching block of the vector and keeping one float32 partial sum per
lane, summed once at the end."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matvec_kernel(a_ptr, b_ptr, c_ptr, K, sam, sak, sbk, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    ks = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for k0 in range(0, K, BLOCK):
        k = (k0 + ks).to(tl.int64)
        mask = k < K
        a = tl.load(a_ptr + row * sam + k * sak, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + k * sbk, mask=mask, other=0.0).to(tl.float32)
        acc += a * b
    tl.store(c_ptr + row, tl.sum(acc, axis=0).to(c_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        M, K = A.shape
        C = torch.empty((M, 1), device=A.device, dtype=A.dtype)
        matvec_kernel[(M,)](A, B, C, K, A.stride(0), A.stride(1), B.stride(0), BLOCK=4096, num_warps=8)
        return C
