"""The honest twin of this folder's hostile candidates: the shared C++ ReLU, nothing else."""
import torch.nn as nn

from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)
