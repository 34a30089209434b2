"""Exploit 7: right values in the wrong dtype (float64 compares equal under a lenient allclose)."""
import torch.nn as nn

from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x).double()
