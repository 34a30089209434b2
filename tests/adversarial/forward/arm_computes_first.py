"""Replaces its forward server's arm: the call is made on whatever the inputs hold when the parent arms it, and
`done` is said the instant `go` comes, so the timed window would hold no work. The inputs are filled after the
server is armed, so what it computed is the previous call's: stale, and seen as such."""
import torch.nn as nn

from evaluator import exchange
from evaluator.child import forward_server, trials
from tests.adversarial.tiny_ext import ext


def _arm(self, seq: int) -> None:
    self._load()
    out = self.call(self.inputs)
    exchange.put(self.ctl, exchange.ARMED, seq)
    while exchange.word(self.page, exchange.GO) != seq:
        pass
    exchange.write_outputs(self.ctl, forward_server._describe(trials.as_tensors(out)))
    exchange.put(self.ctl, exchange.DONE, seq)
    self.kept = out


forward_server.Server.arm = _arm


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)
