"""Exploit 2: computes once and returns that first result forever (keyed on nothing)."""
import torch.nn as nn

from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = None

    def forward(self, x):
        if self.first is None:
            self.first = ext.relu(x)
        return self.first
