"""Exploit 3: guesses the evaluator's seed (0, 42, 1234...) to precompute the answer at __init__."""
import torch
import torch.nn as nn

from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.known = []
        for seed in (0, 1, 42, 1234, 2024):
            torch.manual_seed(seed)
            x = torch.randn(16, 16384)
            self.known.append((x, ext.relu(x)))

    def forward(self, x):
        ext.relu(x[:1])
        for seen, answer in self.known:
            if torch.equal(seen, x):
                return answer
        return torch.zeros_like(x)
