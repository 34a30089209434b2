"""Exploit 9: exits with status 0 in the middle of the run, for a harness that takes exit 0 as success."""
import os

import torch.nn as nn

from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def forward(self, x):
        ext.relu(x)
        os._exit(0)
