import torch
import torch.nn as nn

batch_size = 16
seq_len = 2048
hidden = 4096


class Model(nn.Module):
    """Transformer-style LayerNorm over the hidden (last) dimension, with affine weight and bias."""

    def __init__(self, hidden: int):
        super().__init__()
        self.ln = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs():
    x = torch.randn(batch_size, seq_len, hidden)
    return [x]


def get_init_inputs():
    return [hidden]


KFORGE_META = {
    "name": "layernorm",
    "level": 1,
    "atol": 1e-4,
    "rtol": 1e-4,
    "description": "nn.LayerNorm(4096) on a (16, 2048, 4096) tensor",
    "small": {"batch_size": 2, "seq_len": 64, "hidden": 1024},
    # full size, by hand: fp32 in + out (16*2048*4096) + weight and bias; ~8 per element
    "bytes_moved": 1_073_774_592,
    "flops": 1_073_741_824,
}
