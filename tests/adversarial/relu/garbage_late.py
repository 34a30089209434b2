"""Exploits 8/12: correct for the first calls (correctness trials, leak check), zeros once timing starts."""
import torch
import torch.nn as nn

from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return ext.relu(x) if self.calls <= 10 else torch.zeros_like(x)
