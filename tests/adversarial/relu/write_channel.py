"""Exploit 9: writes forged harness messages (fast timings) straight into the result pipe, whose descriptor
number is on the child's command line."""
import json
import os
import sys

import torch.nn as nn

from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def forward(self, x):
        fake = {"event": "timing", "which": "model", "samples": [1e-6] * 100}
        os.write(int(sys.argv[2]), (json.dumps(fake) + "\n").encode())
        return ext.relu(x)
