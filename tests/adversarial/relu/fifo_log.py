"""Attacks kforge itself: replaces its own log (child.log in its working folder, kept as evidence) with a FIFO and
then fails. The judge reads the end of a failed child's log: a plain open() of a FIFO with no writer left waits
forever, and the whole batch with it."""
import os

import torch.nn as nn

from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def forward(self, x):
        os.unlink("child.log")  # the child's cwd is its workdir
        os.mkfifo("child.log")
        raise RuntimeError(f"{ext.relu(x).numel()} outputs made, then failed with its log a FIFO")
