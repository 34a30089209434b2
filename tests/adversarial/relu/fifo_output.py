"""Attacks kforge itself: swaps each raw-bytes file the harness writes for a FIFO, after the harness opened it and
before the comparer does, so a comparer that opens the path without O_NONBLOCK waits in open() for a writer that
never comes (a submit took 166 s of a 150 s limit, and the next candidate of its problem was `reference_error`).
A thread polls the out dir while the harness waits for the parent's answer; its kernel is honest."""
import os
import threading
import time

import torch.nn as nn

from tests.adversarial.tiny_ext import ext

OUT = "out"  # the child's cwd is its workdir: the harness writes out/<call>.out


def plant() -> None:
    while True:
        for entry in os.scandir(OUT) if os.path.isdir(OUT) else []:
            if entry.name.endswith(".out") and entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)  # the harness's open file goes on to a nameless inode
                os.mkfifo(entry.path)
        time.sleep(0.0002)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        threading.Thread(target=plant, daemon=True).start()

    def forward(self, x):
        return ext.relu(x)
