"""Exploit 8, CPU form of side-stream work: once timing starts, forward() returns at once and a background
thread fills the output a little later, after the timer has stopped."""
import threading
import time

import torch
import torch.nn as nn

from tests.adversarial.tiny_ext import ext


def _fill(out, x):
    time.sleep(0.005)
    out.copy_(ext.relu(x))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls <= 10:
            return ext.relu(x)
        out = torch.zeros_like(x)
        threading.Thread(target=_fill, args=(out, x)).start()
        return out
