"""Starts on its inputs before kforge's clock: a thread watches the inputs' memory and computes each new call's
output the moment new values appear there, and forward() hands back the output already made when its inputs
match. Where the server could run between the comparer's fill and `go` (woken to arm after the fill), the
timed window held only that lookup. Here the comparer holds the timing core from the fill's first byte to
`go`, so the thread starts no earlier than the clock, and the call costs what computing it costs."""
import threading

import torch
import torch.nn as nn

from tests.adversarial.tiny_ext import ext


def _key(x: torch.Tensor) -> bytes:
    flat = x.reshape(-1)
    return flat[:: max(1, flat.numel() // 8)].numpy().tobytes()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.made, self.watched = {}, None

    def _watch(self, x):
        seen = None
        while True:
            key = _key(x)
            if key != seen:
                self.made = {key: ext.relu(x)}
                seen = key

    def forward(self, x):
        if self.watched is None or self.watched.data_ptr() != x.data_ptr():
            self.watched = x
            threading.Thread(target=self._watch, args=(x,), daemon=True).start()
        return self.made.get(_key(x)) if _key(x) in self.made else ext.relu(x)
