"""gc_callback.py on CUDA: the callback queues the kernel after the end event was recorded, before the harness's
stream-ordered snapshot, so the snapshot holds the right values and the events none of the work. The harness
reads part of every output inside the timed window (timing.glimpse), and the comparer holds the snapshot to it."""
import torch.nn as nn

from tests.adversarial.gpu_tiny_ext import ext
from tests.adversarial.reach import collected_forward


class ModelNew(nn.Module):
    forward = collected_forward(ext.relu)
