"""profile_hook.py on CUDA: the hook queues the kernel after the end event was recorded, before the harness
copies the outputs. The harness clears hooks, and copies the outputs, inside the timed window."""
import sys

import torch
import torch.nn as nn

from tests.adversarial.reach import after_timer, in_timing
from tests.adversarial.gpu_tiny_ext import ext


class ModelNew(nn.Module):
    def forward(self, x):
        if not in_timing():
            return ext.relu(x)
        out = torch.empty_like(x)
        sys.setprofile(after_timer(lambda: out.copy_(ext.relu(x))))
        return out
