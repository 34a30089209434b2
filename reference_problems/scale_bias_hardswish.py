import torch
import torch.nn as nn

batch_size = 4096
dim = 16384
scale = 0.5


class Model(nn.Module):
    """Scale, per-feature bias, then hardswish written out as plain ops.

    Eager PyTorch runs six elementwise kernels here (mul, add, add, clamp, mul, div), each a full
    pass over memory with a temporary; a fused kernel needs one read and one write per element.
    """

    def __init__(self, dim: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * self.scale
        x = x + self.bias
        return x * torch.clamp(x + 3.0, 0.0, 6.0) / 6.0


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return [dim, scale]


KFORGE_META = {
    "name": "scale_bias_hardswish",
    "level": 2,
    "atol": 1e-4,
    "rtol": 1e-4,
    "description": "hardswish(x * 0.5 + bias) as six eager elementwise ops on a (4096, 16384) tensor",
    "small": {"batch_size": 64, "dim": 4096},
    # full size, by hand: fp32 in + out (4096*16384) + bias; 7 per element
    "bytes_moved": 536_936_448,
    "flops": 469_762_048,
}
