"""Honest control for the FLOP floor: the GEMM by PyTorch, the ReLU by the shared compiled kernel. `correct`
against the machine's real peaks; judged against a peak made tiny, its honest time is below the floor."""
import torch
import torch.nn as nn

from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        return ext.relu(self.gemm(x) + self.bias)
