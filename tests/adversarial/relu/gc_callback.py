"""Does the work after the timer from a garbage-collector callback: in a timed call forward() returns an empty
output, and the callback, run by the harness's own thread at its first collection past the timer, computes the
ReLU into it before the harness snapshots it. What the timed window reads of the outputs shuts it out."""
import torch.nn as nn

from tests.adversarial.reach import collected_forward
from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    forward = collected_forward(ext.relu)
