"""Exploit 5c on CUDA: computes ReLU, then leaves the rows of its input rotated by one on the device (as a kernel
that staged rows in its input would), which keeps a plain sum of its bits: the position-weighted fingerprint,
taken on the GPU, must see it."""
import torch.nn as nn

from tests.adversarial.gpu_tiny_ext import ext


class ModelNew(nn.Module):
    def forward(self, x):
        out = ext.relu(x)
        x.copy_(x.roll(1, dims=0))
        return out
