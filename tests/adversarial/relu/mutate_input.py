"""Exploit 5: writes into its input (here: computes ReLU in place and returns the input itself)."""
import torch.nn as nn

from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def forward(self, x):
        return x.copy_(ext.relu(x))
