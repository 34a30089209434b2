"""Exploit 1: no custom kernel at all; forward() is the PyTorch op the problem asks to replace."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
