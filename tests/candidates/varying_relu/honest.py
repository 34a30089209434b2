"""An honest ReLU for a problem whose input shape changes with the seed (tests/problems/varying_relu.py)."""
import torch.nn as nn

from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)
