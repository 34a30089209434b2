"""The honest twin of the CUDA attacks here: relu-scale-add computed exactly as the reference computes it."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return torch.relu(x) * self.scale + y
