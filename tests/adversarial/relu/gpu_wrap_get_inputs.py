"""wrap_get_inputs.py on CUDA."""
import torch.nn as nn

from tests.adversarial.reach import work_in_fill
from tests.adversarial.gpu_tiny_ext import ext

_ready = work_in_fill(ext.relu)


class ModelNew(nn.Module):
    def forward(self, x):
        found = _ready.pop(x.data_ptr(), None)
        return found if found is not None else ext.relu(x)
