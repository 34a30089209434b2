"""Returns garbage in timed calls and patches the child-side message that lists the timed calls whose outputs
were handed over, so the judge never looks at them. Every module of the child side is guarded, and the parent
judges every timed call it was handed or asked for, whatever the child lists."""
import sys

import torch
import torch.nn as nn

from evaluator import protocol
from tests.adversarial.frames import in_timing
from tests.adversarial.tiny_ext import ext


class _Quiet(protocol.Probe):
    def __init__(self, **kw):
        kw["outputs"] = {k: v for k, v in kw.get("outputs", {}).items() if not k.startswith("timed_")}
        super().__init__(**kw)


protocol.Probe = _Quiet
for _name in ("evaluator.child", "__main__"):  # the child's entry point, imported or run as a script
    if hasattr(sys.modules.get(_name), "Probe"):
        sys.modules[_name].Probe = _Quiet


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.empty_like(x) if in_timing() else ext.relu(x)
