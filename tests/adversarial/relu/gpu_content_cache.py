"""Exploit 2, the hard kind, on CUDA (cuda_sources= in the shared kernel: GPU only): caches on a few sampled
input values, so new data written into the same tensors once is noticed and computed. New values before every
timed call make it compute every time: it is timed doing the work."""
import torch
import torch.nn as nn

from tests.adversarial.gpu_tiny_ext import ext


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.key, self.answer = None, None

    def forward(self, x):
        flat = x.view(-1)
        key = torch.stack([flat[0], flat[flat.numel() // 2], flat[-1]]).tolist()
        if key != self.key:
            self.key, self.answer = key, ext.relu(x)
        return self.answer
