"""Exploit 7: installs a TorchFunctionMode at import that would rewrite every torch call the judge makes."""
import torch.nn as nn
from torch.overrides import TorchFunctionMode

from tests.adversarial.tiny_ext import ext


class _Rewrite(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


_Rewrite().__enter__()


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)
