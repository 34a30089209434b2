"""Does the work after the timer: in a timed call forward() returns an empty output and leaves a profile hook
that, once the harness has read its timer, computes the ReLU into that output and removes itself. A harness
that reads outputs only after that sees work it never timed. The harness clears hooks inside the timed window."""
import torch.nn as nn

from tests.adversarial.reach import hooked_forward
from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    forward = hooked_forward(ext.relu)
