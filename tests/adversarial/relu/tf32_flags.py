"""Exploit 6: flips the global numeric flags at import (TF32, cuDNN autotuning, matmul precision)."""
import torch
import torch.nn as nn

from tests.adversarial.tiny_ext import ext

torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.benchmark = True
torch.set_float32_matmul_precision("medium")


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)
