"""Exploit 6: neuters torch.cuda.synchronize and torch.cuda.Event at import (the GPU timer's pillars)."""
import torch
import torch.nn as nn

from tests.adversarial.tiny_ext import ext

torch.cuda.synchronize = lambda *args, **kwargs: None


class _Event:
    def __init__(self, *args, **kwargs):
        pass

    def record(self, *args):
        pass

    def elapsed_time(self, other):
        return 1e-6


torch.cuda.Event = _Event


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)
