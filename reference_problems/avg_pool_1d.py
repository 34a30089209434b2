import torch
import torch.nn as nn

batch_size = 64
in_channels = 128
input_length = 65536
kernel_size = 8
stride = 1
padding = 4


class Model(nn.Module):
    """1D average pooling over the last dimension of a (batch, channels, length) tensor."""

    def __init__(self, kernel_size: int, stride: int = 1, padding: int = 0):
        super().__init__()
        self.avg_pool = nn.AvgPool1d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.avg_pool(x)


def get_inputs():
    x = torch.rand(batch_size, in_channels, input_length)
    return [x]


def get_init_inputs():
    return [kernel_size, stride, padding]


KFORGE_META = {
    "name": "avg_pool_1d",
    "level": 1,
    "atol": 1e-4,
    "rtol": 1e-4,
    "description": "nn.AvgPool1d(kernel_size=8, stride=1, padding=4) on a (64, 128, 65536) tensor",
    "small": {"batch_size": 4, "in_channels": 8, "input_length": 4096},
    # full size, by hand: fp32 in (64*128*65536) + out (64*128*65537); 8 adds/div per output
    "bytes_moved": 4_295_000_064,
    "flops": 4_295_032_832,
}
