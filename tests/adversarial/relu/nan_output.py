"""Exploit 11: NaN outputs, for a checker where NaN compares as "not different"."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.full_like(x, float("nan"))
