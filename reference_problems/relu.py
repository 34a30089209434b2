import torch
import torch.nn as nn

batch_size = 4096
dim = 65536


class Model(nn.Module):
    """Elementwise ReLU."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []


KFORGE_META = {
    "name": "relu",
    "level": 1,
    "atol": 1e-4,
    "rtol": 1e-4,
    "description": "torch.relu on a (4096, 65536) tensor",
    "small": {"batch_size": 16, "dim": 16384},
    # full size, by hand: fp32 in + out (4096*65536); 1 per element
    "bytes_moved": 2_147_483_648,
    "flops": 268_435_456,
}
