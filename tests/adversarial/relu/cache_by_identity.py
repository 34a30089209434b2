"""Exploit 2: caches the result per input tensor object. The trials use fresh tensors (so they pass); the timed
calls reuse one input tensor, so every timed call after the first costs nothing."""
import torch.nn as nn

from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x):
        if id(x) not in self.cache:
            self.cache[id(x)] = (x, ext.relu(x))  # keep x alive so its id stays unique
        return self.cache[id(x)][1]
