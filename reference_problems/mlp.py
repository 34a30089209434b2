import torch
import torch.nn as nn

batch_size = 4096
input_size = 4096
hidden_size = 8192
output_size = 1024


class Model(nn.Module):
    """Three-layer MLP: Linear -> ReLU -> Linear -> ReLU -> Linear."""

    def __init__(self, input_size: int, hidden_size: int, output_size: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(input_size, hidden_size),
            nn.ReLU(),
            nn.Linear(hidden_size, hidden_size),
            nn.ReLU(),
            nn.Linear(hidden_size, output_size),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def get_inputs():
    x = torch.randn(batch_size, input_size)
    return [x]


def get_init_inputs():
    return [input_size, hidden_size, output_size]


KFORGE_META = {
    "name": "mlp",
    "level": 3,
    # nn.Linear's init keeps activations O(1), so fp32 error stays ~1e-5 across the three layers
    "atol": 1e-4,
    "rtol": 1e-4,
    "description": "3-layer MLP 4096 -> 8192 -> 8192 -> 1024 with ReLU, batch 4096",
    "small": {"batch_size": 16, "input_size": 256, "hidden_size": 512, "output_size": 128},
    # full size, by hand: fp32 x + 3 weights and biases + out (4096*1024); 2*4096*(4096*8192 + 8192^2 + 8192*1024)
    "bytes_moved": 520_163_328,
    "flops": 893_353_197_568,
}
