"""Correct in the first process it runs in, zeros in every later one (a CPU candidate is timed in several fresh
process pairs, Batch.pairs): it leaves a mark in its working folder, which its later processes share. Each
pair is judged in full, so the pair where it returns zeros decides."""
import os
from pathlib import Path

import torch
import torch.nn as nn

from tests.adversarial.tiny_ext import ext

_MARK = Path(os.getcwd()) / "kforge-adversarial-was-here"
_LATER = _MARK.exists()
_MARK.touch()


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.zeros_like(x) if _LATER else ext.relu(x)
