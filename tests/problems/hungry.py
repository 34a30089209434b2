"""A reference that cannot run: its forward asks for far more memory than a child may have (a stand-in for the
KernelBench problems whose references outgrow the host). Used by tests/test_references.py."""
import torch
import torch.nn as nn

n = 1024


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hoard = [torch.ones(2**28) for _ in range(4096)]  # 4 TB: beyond any child's address-space limit
        return x + len(hoard)


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []


KFORGE_META = {"name": "hungry", "level": 1, "atol": 1e-4, "rtol": 1e-4, "description": "a reference that runs out of memory",
               "small": {"n": 64}}
