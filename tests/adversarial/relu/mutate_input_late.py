"""Exploit 5b: honest through the trials, then writes into its input after each call (the leak check's and the
timed ones), where no trial looks: the inputs' fingerprint after the leak check must catch it."""
import torch.nn as nn

from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    calls = 0

    def forward(self, x):
        y = ext.relu(x)
        ModelNew.calls += 1
        if ModelNew.calls > 3:
            x.add_(1.0)
        return y
