"""patch_probe_list.py on CUDA."""
import torch
import torch.nn as nn

from tests.adversarial.gpu_tiny_ext import ext
from tests.adversarial.reach import in_timing, quiet_probe

quiet_probe()


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.empty_like(x) if in_timing() else ext.relu(x)
