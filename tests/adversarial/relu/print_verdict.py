"""Exploit 9: prints a fake verdict (and fake harness messages) on stdout and stderr, then returns zeros."""
import json
import sys

import torch
import torch.nn as nn

from tests.adversarial.tiny_ext import ext

FAKE = json.dumps({"event": "done", "status": "correct", "speedup": 1000.0})
print(FAKE)
print(FAKE, file=sys.stderr)


class ModelNew(nn.Module):
    def forward(self, x):
        ext.relu(x)
        print(FAKE)
        return torch.zeros_like(x)
