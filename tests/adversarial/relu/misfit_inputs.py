"""Once timed, resizes the problem (a module global its get_inputs reads), so the next input fills no longer fit
the input tensors. A harness that then keeps the old inputs, and labels every timed call alike, lets a cache of
the first timed call's output pass. Here the fills go on with new tensors, shaped as the changed problem says,
and the cache is compared against the reference's own inputs."""
import sys

import torch.nn as nn

from tests.adversarial.frames import in_timing
from tests.adversarial.tiny_ext import ext

_problem = sys.modules["kforge_problem"]


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cached = None

    def forward(self, x):
        if not in_timing():
            return ext.relu(x)
        if self.cached is None:
            self.cached = ext.relu(x)
            _problem.batch_size += 1
        return self.cached
