"""misfit_inputs.py on CUDA."""
import torch.nn as nn

from tests.adversarial.gpu_tiny_ext import ext
from tests.adversarial.reach import resizing_cache


class ModelNew(nn.Module):
    forward = resizing_cache(ext.relu)
