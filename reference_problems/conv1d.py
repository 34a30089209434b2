import torch
import torch.nn as nn

batch_size = 32
in_channels = 64
out_channels = 128
kernel_size = 3
length = 131072


class Model(nn.Module):
    """Standard 1D convolution (nn.Conv1d) over a (batch, in_channels, length) tensor."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 padding: int = 0, dilation: int = 1, groups: int = 1, bias: bool = False):
        super().__init__()
        self.conv1d = nn.Conv1d(in_channels, out_channels, kernel_size, stride=stride, padding=padding,
                                dilation=dilation, groups=groups, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv1d(x)


def get_inputs():
    x = torch.randn(batch_size, in_channels, length)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]


KFORGE_META = {
    "name": "conv1d",
    "level": 1,
    # each output sums only in_channels * kernel_size = 192 products: 1e-4 holds in fp32
    "atol": 1e-4,
    "rtol": 1e-4,
    "description": "nn.Conv1d(64, 128, kernel_size=3, bias=False) on a (32, 64, 131072) tensor",
    "small": {"batch_size": 2, "in_channels": 8, "out_channels": 16, "length": 2048},
    # full size, by hand: fp32 in + weight (128*64*3) + out (32*128*131070); 2*64*3 per output
    "bytes_moved": 3_221_291_008,
    "flops": 206_155_284_480,
}
