import torch
import torch.nn as nn

batch_size = 128
in_features = 32768
out_features = 32768
kernel_size = 2
scale_factor = 0.5


class Model(nn.Module):
    """Linear layer, then MaxPool1d over the features, a sum over them, and a scale."""

    def __init__(self, in_features: int, out_features: int, kernel_size: int, scale_factor: float):
        super().__init__()
        self.matmul = nn.Linear(in_features, out_features)
        self.max_pool = nn.MaxPool1d(kernel_size)
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.matmul(x)
        x = self.max_pool(x.unsqueeze(1)).squeeze(1)
        x = torch.sum(x, dim=1)
        x = x * self.scale_factor
        return x


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features, kernel_size, scale_factor]


KFORGE_META = {
    "name": "matmul_maxpool_sum_scale",
    "level": 2,
    # each output sums 16384 pooled values and is large (~2700 at full size), so rtol=1e-4
    # absorbs the reduction-order error of the 32768-long dot products
    "atol": 1e-4,
    "rtol": 1e-4,
    "description": "Linear(32768, 32768) -> MaxPool1d(2) -> sum over features -> * 0.5, batch 128",
    "small": {"batch_size": 8, "in_features": 256, "out_features": 256},
    # full size, by hand: fp32 x + W (32768^2) + bias + out (128); the Linear's 2*128*32768^2
    "bytes_moved": 4_311_876_096,
    "flops": 274_877_906_944,
}
