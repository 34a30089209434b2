"""Exploit 2: caches the result per input address, keeping each input alive so no address is reused (the trials
pass). The timed calls reuse one input tensor: every one of them returns the first result computed on it."""
import torch.nn as nn

from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x):
        if x.data_ptr() not in self.cache:
            self.cache[x.data_ptr()] = (x, ext.relu(x))  # keep x alive so its address stays its own
        return self.cache[x.data_ptr()][1]
