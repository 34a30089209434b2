"""Exploit 5c on CUDA: computes ReLU, then leaves its input reversed on the device (the input used as scratch),
which keeps a plain sum of its bits: the position-weighted fingerprint, taken on the GPU, must see it."""
import torch.nn as nn

from tests.adversarial.gpu_tiny_ext import ext


class ModelNew(nn.Module):
    def forward(self, x):
        y = ext.relu(x)
        flat = x.view(-1)
        flat.copy_(flat.flip(0))
        return y
