import torch
import torch.nn as nn

batch_size = 16
channels = 64
height = 2048
width = 2048
kernel_size = 11


class Model(nn.Module):
    """2D average pooling with a square window; stride defaults to the window size."""

    def __init__(self, kernel_size: int, stride: int = None, padding: int = 0):
        super().__init__()
        self.avg_pool = nn.AvgPool2d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.avg_pool(x)


def get_inputs():
    x = torch.rand(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [kernel_size]


KFORGE_META = {
    "name": "avg_pool_2d",
    "level": 1,
    "atol": 1e-4,
    "rtol": 1e-4,
    # the full input has 2^32 elements: 32-bit flat indices overflow
    "description": "nn.AvgPool2d(kernel_size=11) on a (16, 64, 2048, 2048) tensor",
    "small": {"batch_size": 2, "channels": 4, "height": 128, "width": 128},
    # full size, by hand: fp32 in (16*64*2048^2) + out (16*64*186^2); 121 adds/div per output
    "bytes_moved": 17_321_574_400,
    "flops": 4_286_582_784,
}
