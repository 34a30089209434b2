"""Hostile: caches its outputs per input tensor object, as tests/adversarial/relu/cache_by_identity.py does with a
C++ extension. The trials use fresh tensors (so they pass); the timed calls reuse one input tensor, so every timed
call after the first returns the first one's result without launching anything."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if id(x) not in self.cache:
            y = torch.empty_like(x)
            relu_kernel[(triton.cdiv(x.numel(), 4096),)](x, y, x.numel(), BLOCK=4096)
            self.cache[id(x)] = (x, y)  # keep x alive so its id stays unique
        return self.cache[id(x)][1]
