"""Exploit 2 on CUDA (cuda_sources= in the shared kernel: GPU only): caches the result per input tensor."""
import torch.nn as nn

from tests.adversarial.gpu_tiny_ext import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x):
        if id(x) not in self.cache:
            self.cache[id(x)] = (x, ext.relu(x))
        return self.cache[id(x)][1]
