"""Exploit 9: looks for the database and for secrets in its environment, and reports what it found in
an exception (the only channel a test can read)."""
import os

import torch.nn as nn

_db = os.path.expanduser("~/.kforge/kforge.db")
raise RuntimeError(f"ENV={sorted(os.environ)} HOME={os.environ.get('HOME')} DB_EXISTS={os.path.exists(_db)}")


class ModelNew(nn.Module):
    def forward(self, x):
        return x
