"""A disturber on CUDA: an honest relu, plus a thread that keeps the GPU's queue full of spin kernels
on a side stream. The parent freezes the candidate's processes while it times the reference beside a round,
but kernels already queued run on, in another context: the reference, time-sliced against them, looks slow,
and a paired ratio would flatter the candidate."""
import threading

import torch
import torch.nn as nn

from tests.adversarial.gpu_tiny_ext import ext


def _flood(stream: torch.cuda.Stream) -> None:
    with torch.cuda.stream(stream):
        while True:
            torch.cuda._sleep(200_000)  # ~0.1 ms on one SM; the launch queue holds ~1000: ~0.1 s of work


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.flooding = False

    def forward(self, x):
        if not self.flooding:
            self.flooding = True
            threading.Thread(target=_flood, args=(torch.cuda.Stream(),), daemon=True).start()
        return ext.relu(x)
