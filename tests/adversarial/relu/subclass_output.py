"""Exploit 7: returns a tensor subclass whose methods lie (detach/to/cpu/clone return a correct-looking copy
of something else, __torch_function__ intercepts everything)."""
import torch
import torch.nn as nn

from tests.adversarial.tiny_ext import ext


class Liar(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return torch.zeros(16, 16384)

    def detach(self):
        return torch.zeros(16, 16384)

    def to(self, *args, **kwargs):
        return torch.zeros(16, 16384)

    def cpu(self):
        return torch.zeros(16, 16384)


class ModelNew(nn.Module):
    def forward(self, x):
        ext.relu(x)  # a kernel of its own runs: what is tested is the check of the output's type
        return torch.zeros_like(x).as_subclass(Liar)
