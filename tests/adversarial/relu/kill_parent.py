"""Exploit 9: signals the kforge process from inside the child (SIGCONT here: harmless if it got through,
so a test can prove it does not; SIGKILL would take the evaluator down)."""
import os
import signal

import torch.nn as nn

from tests.adversarial.tiny_ext import ext

os.kill(os.getppid(), signal.SIGCONT)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)
