"""A timer wrapper modest enough for a wall-clock check that trusts the child's own fill total: one timed call
in ten reports its real time (the shared kernel: ~3.2 ms here, about what the harness's cache flush and fill of
a rep take). The other nine swap time.perf_counter for a fake that puts the real one back and reports 1/256
of the call (~8x the reference), and add the time they hid to the harness's fill total (the FreshInputs hook of
the timing loop), so the samples plus the fills still cover the loop's wall-clock."""
import sys
import time

import torch.nn as nn

from tests.adversarial.tiny_ext import ext

_real = time.perf_counter
_SHARE = 1 / 256


def _timed_round():
    """The timing loop's locals around this call (its `start` and its `fresh` hook), or None outside it."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_cpu_round" and "start" in frame.f_locals:
            return frame.f_locals
        frame = frame.f_back
    return None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.timed = 0

    def forward(self, x):
        loop = _timed_round()
        out = ext.relu(x)
        if loop is None:
            return out
        self.timed += 1
        if self.timed % 10:
            start, fresh = loop["start"], loop["fresh"]
            reported = (_real() - start) * _SHARE
            fresh.timed_fill_s += _real() - start - reported

            def fake():
                time.perf_counter = _real
                return start + reported
            time.perf_counter = fake
        return out
