"""Writes a forged `pace` message into the result pipe on its first call, asking the parent to time the
reference for a million reps (interleaved timing, evaluator/verdict/pacing.py): a stall of kforge, or pairs out of step."""
import json
import os
import sys

import torch.nn as nn

from tests.adversarial.tiny_ext import ext

_SENT = []


class ModelNew(nn.Module):
    def forward(self, x):
        if not _SENT:
            _SENT.append(1)
            fake = {"event": "pace", "which": 0, "reps": 10**6, "last_round": [], "least": 10**6}
            os.write(int(sys.argv[2]), (json.dumps(fake) + "\n").encode())
        return ext.relu(x)
