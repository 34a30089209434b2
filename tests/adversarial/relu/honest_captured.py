"""Honest control: calls its compiled ReLU through a reference captured at import (must be `correct`)."""
import torch.nn as nn

from tests.adversarial.tiny_ext import ext

relu = ext.relu  # captured before kforge's watch sees forward(): still counted (by identity)


class ModelNew(nn.Module):
    def forward(self, x):
        return relu(x)
