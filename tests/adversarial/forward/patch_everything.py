"""Replaces, while each of its calls runs, every Python-level attribute an in-process harness would call to time,
choose or read a call: the clocks (time.perf_counter, time.monotonic, time.perf_counter_ns),
torch.cuda.Event.elapsed_time, os.urandom, random.random, the result channel's writes and the exchange's own
word writes, each fake reporting a tenth of the truth; and puts them back as the call returns, so no guard ever
sees them. Under trusted timing nobody who holds the clock or draws a check reads any of them: its speedup must
be its honest twin's."""
import os
import random
import time

import torch
import torch.nn as nn

from evaluator import exchange
from evaluator.child import stages
from tests.adversarial.tiny_ext import ext

_REAL = [(time, "perf_counter"), (time, "monotonic"), (time, "perf_counter_ns"), (torch.cuda.Event, "elapsed_time"),
         (os, "urandom"), (random, "random"), (stages.Channel, "send"), (exchange, "put")]
_pc, _mono, _ns, _put = time.perf_counter, time.monotonic, time.perf_counter_ns, exchange.put
_FAKES = [lambda: _pc() / 10, lambda: _mono() / 10, lambda: _ns() // 10, lambda self, end: 0.001, lambda n: bytes(n),
          lambda: 0.99, lambda self, message: None, lambda page, at, value: _put(page, at, value)]


class ModelNew(nn.Module):
    def forward(self, x):
        saved = [getattr(owner, name) for owner, name in _REAL]
        for (owner, name), fake in zip(_REAL, _FAKES):
            setattr(owner, name, fake)
        try:
            return ext.relu(x)
        finally:
            for (owner, name), real in zip(_REAL, saved):
                setattr(owner, name, real)
