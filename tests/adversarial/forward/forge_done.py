"""Finds its forward server's control page and writes `done` itself the moment the comparer says go, pointing the
outputs' description at the last call's result; the real work runs after, on a thread: each call would be
timed at nothing. What the parent reads at done is then another call's output. (A Python thread gets the GIL
only every few milliseconds, so the server's own `done` mostly lands first: native code would race better, and
is caught the same way, by the last call and the verify call that are always read.)"""
import gc
import threading

import torch.nn as nn

from evaluator import exchange
from evaluator.child import forward_server
from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.watching = False

    def _watch(self, server):
        while True:
            seq = exchange.word(server.page, exchange.GO)
            if exchange.word(server.ctl, exchange.DONE) != seq:
                exchange.put(server.ctl, exchange.DONE, seq)

    def forward(self, x):
        if not self.watching:
            server = next((o for o in gc.get_objects() if isinstance(o, forward_server.Server)), None)
            if server is not None:
                self.watching = True
                threading.Thread(target=self._watch, args=(server,), daemon=True).start()
        return ext.relu(x)
