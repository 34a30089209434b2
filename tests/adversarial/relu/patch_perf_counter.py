"""Exploit 6: replaces time.perf_counter at import, so every timed call looks 1000x faster."""
import time

import torch.nn as nn

from tests.adversarial.tiny_ext import ext

_real = time.perf_counter
time.perf_counter = lambda: _real() / 1000.0


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)
