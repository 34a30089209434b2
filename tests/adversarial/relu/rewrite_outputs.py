"""Exploit 9: rewrites the output files the harness already saved (its own folder, so it may), here with
junk. Each call's outputs are judged when handed over and then removed, so it finds none and stays correct."""
import glob

import torch.nn as nn

from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def forward(self, x):
        for path in glob.glob("out/*.out"):  # the child's cwd is its workdir
            with open(path, "wb") as fh:
                fh.write(b"not a tensor")
        return ext.relu(x)
