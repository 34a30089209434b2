"""Exploit 5c: writes into its input without changing its sum: computes ReLU, then leaves the input reversed, as a
kernel that used its input as scratch for an in-place transpose or sort would. A plain checksum of the input's
bits is the same before and after; the position-weighted one (trials._checksum) is not."""
import torch.nn as nn

from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def forward(self, x):
        y = ext.relu(x)
        flat = x.view(-1)
        flat.copy_(flat.flip(0))
        return y
