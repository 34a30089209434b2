"""Exploit 2, the hard kind: caches on the input's address plus a few sampled values, so new data written into
the same tensors is noticed and computed. Only fresh values before every timed call defeat it: then every timed
call computes, and its speedup is the kernel's own."""
import torch.nn as nn

from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.key, self.answer = None, None

    def forward(self, x):
        flat = x.view(-1)
        key = (x.data_ptr(), float(flat[0]), float(flat[flat.numel() // 2]), float(flat[-1]))
        if key != self.key:
            self.key, self.answer = key, ext.relu(x)
        return self.answer
