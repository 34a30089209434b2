"""Dereferences NULL in forward(): the child dies by SIGSEGV; kforge reports it and carries on."""
import ctypes

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim, scale):
        super().__init__()

    def forward(self, x):
        return ctypes.string_at(0)
