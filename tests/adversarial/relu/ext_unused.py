"""Exploit 1: builds a compiled extension (so it "has a kernel") but forward() never calls it."""
import torch
import torch.nn as nn

from tests.adversarial.tiny_ext import ext  # noqa: F401 - built, never used


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.clamp_min(x, 0.0)
