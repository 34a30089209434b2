"""Exploit 6/8, the careful kind: inside a timed call it swaps time.perf_counter for a fake that reports
"no time passed" once and then puts the real one back, so nothing is left replaced for a check to find."""
import sys
import time

import torch.nn as nn

from tests.adversarial.tiny_ext import ext

_real = time.perf_counter


def _timed_loop_start():
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_cpu_round" and "start" in frame.f_locals:
            return frame.f_locals["start"]
        frame = frame.f_back
    return None


class ModelNew(nn.Module):
    def forward(self, x):
        start = _timed_loop_start()
        out = ext.relu(x)
        time.sleep(0.08)  # the real work is slow
        if start is not None:
            def fake():
                time.perf_counter = _real
                return start + 1e-6
            time.perf_counter = fake
        return out
