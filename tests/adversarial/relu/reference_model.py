"""Exploit 1: imports the problem module and runs its Model (after a token call of a compiled kernel)."""
import torch.nn as nn

from reference_problems.relu import Model
from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.reference = Model()

    def forward(self, x):
        ext.relu(x[:1, :1])  # a token call, so "an extension ran" alone would not catch it
        return self.reference(x)
