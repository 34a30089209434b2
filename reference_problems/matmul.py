import torch
import torch.nn as nn

N = 4096


class Model(nn.Module):
    """Square matrix multiplication C = A @ B."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    A = torch.randn(N, N)
    B = torch.randn(N, N)
    return [A, B]


def get_init_inputs():
    return []


KFORGE_META = {
    "name": "matmul",
    "level": 1,
    # loose: each output sums N=4096 products of randn values (|C| ~ 64). Plain sequential fp32
    # accumulation (a naive kernel's order) was measured up to ~1e-3 off the fp64 result, failing
    # 1e-4; atol=1e-2 leaves a 10x margin yet still catches TF32 (errors ~3e-2).
    "atol": 1e-2,
    "rtol": 1e-4,
    "description": "square fp32 matmul, A (4096, 4096) @ B (4096, 4096)",
    "small": {"N": 256},
    # full size, by hand: fp32 A, B and C (4096^2 each); 2*4096^3
    "bytes_moved": 201_326_592,
    "flops": 137_438_953_472,
}
