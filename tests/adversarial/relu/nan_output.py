"""Exploit 11: NaN outputs, for a checker where NaN compares as "not different"."""
import torch
import torch.nn as nn

from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def forward(self, x):
        ext.relu(x)  # a kernel of its own runs: what is tested is the comparison of the NaNs
        return torch.full_like(x, float("nan"))
