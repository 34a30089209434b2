"""Moves the work into the untimed input fill: the problem's get_inputs is wrapped, so each time the harness
writes a timed call's new inputs, the output is computed there and the timed call returns it at once."""
import torch.nn as nn

from tests.adversarial.reach import work_in_fill
from tests.adversarial.tiny_ext import ext

_ready = work_in_fill(ext.relu)


class ModelNew(nn.Module):
    def forward(self, x):
        found = _ready.pop(x.data_ptr(), None)
        return found if found is not None else ext.relu(x)
