"""Budgets: in forward (the candidate child), fills its TMPDIR with files it deletes at once and keeps open (16 of
256 MiB: 4 GiB), which no walk of its folders finds; says how much it wrote when the kernel refused more."""
import os

import torch.nn as nn

BLOCK = b"\1" * 2**20
HELD = []


class ModelNew(nn.Module):
    def forward(self, x):
        written = 0
        try:
            for i in range(16):
                fh = open(os.path.join(os.environ["TMPDIR"], f"held{i}.bin"), "wb", buffering=0)
                os.unlink(fh.name)
                HELD.append(fh)
                for _ in range(256):
                    written += fh.write(BLOCK)
        except OSError as exc:
            said = f"{exc.strerror} after {written} bytes"
            print(f"kforge-test: {said}", flush=True)  # into its log, whose first MiB is kept for it
            raise OSError(exc.errno, said) from None
        return x.relu()
