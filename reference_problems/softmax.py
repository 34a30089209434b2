import torch
import torch.nn as nn

batch_size = 4096
dim = 65536


class Model(nn.Module):
    """Softmax over the last dimension of a (batch, dim) tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []


KFORGE_META = {
    "name": "softmax",
    "level": 1,
    # outputs average 1/dim (~1.5e-5), so atol=1e-4 would accept an all-zero answer;
    # 1e-6 still lies far above fp32 error, which rtol covers
    "atol": 1e-6,
    "rtol": 1e-4,
    "description": "torch.softmax(x, dim=1) on a (4096, 65536) tensor",
    "small": {"batch_size": 16, "dim": 16384},
    # full size, by hand: fp32 in + out (4096*65536); max, sub, exp, sum, div per element
    "bytes_moved": 2_147_483_648,
    "flops": 1_342_177_280,
}
