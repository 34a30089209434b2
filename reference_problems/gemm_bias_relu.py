import torch
import torch.nn as nn

batch_size = 1024
in_features = 8192
out_features = 8192


class Model(nn.Module):
    """GEMM (no bias inside the Linear), then a separate bias add, then ReLU."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.gemm(x)
        x = x + self.bias
        return torch.relu(x)


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features]


KFORGE_META = {
    "name": "gemm_bias_relu",
    "level": 2,
    # the Linear's weights are ~1/sqrt(in_features), so outputs stay O(1) and fp32 error ~1e-5
    "atol": 1e-4,
    "rtol": 1e-4,
    "description": "relu(x @ W.T + bias) with x (1024, 8192) and W (8192, 8192)",
    "small": {"batch_size": 32, "in_features": 256, "out_features": 256},
    # full size, by hand: fp32 x + W (8192^2) + bias + out; 2*1024*8192^2 + bias and relu
    "bytes_moved": 335_577_088,
    "flops": 137_455_730_688,
}
