"""Not an exploit: a CUDA candidate that asks for more device memory than any GPU has. In the jail PyTorch's
out-of-memory report stops at NVML (an internal assert that says nothing of memory); the verdict must still
name the out-of-memory."""
import torch
import torch.nn as nn

from tests.adversarial.gpu_tiny_ext import ext


class ModelNew(nn.Module):
    def forward(self, x):
        scratch = torch.empty(2**41, dtype=torch.uint8, device=x.device)  # 2 TiB
        return ext.relu(x) + scratch[:1].float()
