"""Budgets: makes empty files at import until the kernel refuses one (20,000 unless something stops it), which hold
no bytes but an entry each; says how many it made when the kernel refused one."""
import os

import torch.nn as nn

made = 0
try:
    for made in range(20_000):
        open(os.path.join(os.environ["TMPDIR"], f"entry{made}"), "wb").close()
except OSError as exc:
    said = f"{exc.strerror} after {made} files"
    print(f"kforge-test: {said}", flush=True)  # into its log, whose first MiB is kept for it
    raise OSError(exc.errno, said) from None


class ModelNew(nn.Module):
    def forward(self, x):
        return x.relu()
