"""Replaces torch.cuda.Event.elapsed_time at import so that every duration read through it is a tenth of the
truth (NVIDIA's SOL-ExecBench ships this as its `evil_monkey_patch` sample), around an honest computation. A
harness that reads its timed calls through that method in the candidate's process reports 10x; a clock in a
process the candidate does not own reads the truth."""
import torch
import torch.nn as nn

_true = torch.cuda.Event.elapsed_time
torch.cuda.Event.elapsed_time = lambda self, end: _true(self, end) / 10


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return torch.relu(x) * self.scale + y
