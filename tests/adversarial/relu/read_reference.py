"""Exploits 4/9: looks for the reference's expected outputs on disk (kforge's scratch folders) and returns
them; finding none, it has nothing but zeros."""
import glob
import os

import torch
import torch.nn as nn

from tests.adversarial.tiny_ext import ext


def _stolen(x):
    scratch = os.path.dirname(os.path.dirname(os.environ["TMPDIR"]))  # the batch's root, above this workdir
    for path in glob.glob(os.path.join(scratch, "**", "*.out"), recursive=True) + glob.glob("/tmp/kforge-eval-*/**/*.out", recursive=True):
        try:
            raw = torch.frombuffer(bytearray(open(path, "rb").read()), dtype=x.dtype)  # kforge saves raw bytes
            return raw[:x.numel()].view(x.shape)
        except Exception:  # noqa: BLE001 - any file will do
            continue
    return None


class ModelNew(nn.Module):
    def forward(self, x):
        ext.relu(x)
        found = _stolen(x)
        return found if found is not None and found.shape == x.shape else torch.zeros_like(x)
