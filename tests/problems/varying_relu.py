"""ReLU on a batch whose length is drawn with the inputs: each seed gives another shape, as in KernelBench
problems that draw sizes in get_inputs. Used by tests/test_harness_reach.py."""
import torch
import torch.nn as nn

dim = 4096


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    rows = int(torch.randint(8, 33, ()).item())
    return [torch.randn(rows, dim)]


def get_init_inputs():
    return []


KFORGE_META = {"name": "varying_relu", "level": 1, "atol": 1e-4, "rtol": 1e-4,
               "description": "torch.relu on (8-32, 4096): the rows change with the seed", "small": {"dim": 4096}}
