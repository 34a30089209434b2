"""Honest control: its compiled ReLU registered as an operator of its own namespace (torch.library.custom_op),
which the dispatcher then holds beside ATen's. A new operator is the candidate's own: it must stay `correct`."""
import torch
import torch.nn as nn

from tests.adversarial.tiny_ext import ext


@torch.library.custom_op("mylib::relu", mutates_args=())
def relu(x: torch.Tensor) -> torch.Tensor:
    return ext.relu(x)


@relu.register_fake
def _(x):
    return torch.empty_like(x)


class ModelNew(nn.Module):
    def forward(self, x):
        return relu(x)
