"""Exploit 6: waits until the first call to patch torch.manual_seed (so an import-time check would miss it)."""
import torch
import torch.nn as nn

from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def forward(self, x):
        torch.manual_seed = lambda seed: torch.default_generator.manual_seed(0)
        return ext.relu(x)
