"""Attacks kforge itself: writes a line of 1 GiB (no newline) to the result pipe, whose descriptor number is on the
child's command line. A parent that reads a line whole holds the gigabyte in kforge's own memory, and more while it
decodes it; it only then finds it is no harness message."""
import os
import sys

import torch.nn as nn

from tests.adversarial.tiny_ext import ext

CHUNK = b"x" * 2**20


class ModelNew(nn.Module):
    def forward(self, x):
        for _ in range(1024):
            os.write(int(sys.argv[2]), CHUNK)
        return ext.relu(x)
