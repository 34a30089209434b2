"""Returns garbage in timed calls and patches the child-side message that lists the timed calls whose outputs
were handed over, so the judge never looks at them. Every module of the child side is guarded, and the parent
judges every timed call it was handed or asked for, whatever the child lists."""
import torch
import torch.nn as nn

from tests.adversarial.reach import in_timing, quiet_probe
from tests.adversarial.tiny_ext import ext

quiet_probe()


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.empty_like(x) if in_timing() else ext.relu(x)
