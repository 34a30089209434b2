"""Exploit 8 on CUDA (cuda_sources= in the shared kernel: GPU only): once timing starts, forward() does
its work on a side stream that the timed stream never waits for, so the end event fires at once."""
import torch
import torch.nn as nn

from tests.adversarial.gpu_tiny_ext import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.side = torch.cuda.Stream()

    def forward(self, x):
        self.calls += 1
        if self.calls <= 10:
            return ext.relu(x)
        out = torch.zeros_like(x)
        with torch.cuda.stream(self.side):
            torch.cuda._sleep(2_000_000)  # a slow kernel, finishing long after the timer stopped
            out.copy_(ext.relu(x))
        return out
