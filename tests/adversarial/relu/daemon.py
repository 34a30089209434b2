"""Exploit 9: leaves a daemon behind (double fork + setsid, out of the child's process group, its parent-death
signal cleared, then a shell loop) that would keep burning CPU while other candidates and the reference are
timed. Its command line carries a marker the tests look for under /proc."""
import ctypes
import os

import torch.nn as nn

from tests.adversarial.tiny_ext import ext

MARKER = "kforge-adversarial-daemon"

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)  # PR_SET_PDEATHSIG 0: no signal when its parent dies
        os.execvp("sh", ["sh", "-c", "while :; do sleep 0.2; done", MARKER])
    os._exit(0)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)
