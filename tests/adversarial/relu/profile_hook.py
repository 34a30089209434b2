"""Does the work after the timer: in a timed call forward() returns an empty output and leaves a profile hook
that, once the harness has read its timer, computes the ReLU into that output and removes itself. A harness
that reads outputs only after that sees work it never timed. The harness clears hooks inside the timed window."""
import sys

import torch
import torch.nn as nn

from tests.adversarial.reach import after_timer, in_timing
from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def forward(self, x):
        if not in_timing():
            return ext.relu(x)
        out = torch.empty_like(x)
        sys.setprofile(after_timer(lambda: out.copy_(ext.relu(x))))
        return out
