"""What a command costs before it judges anything: a stored verdict comes back without importing torch (seconds
on a small machine) or alembic, through the real `kforge` process."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CUT_OFF = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x"


@pytest.mark.skipif(bool(glob.glob("/dev/nvidia[0-9]*")), reason="an NVIDIA device here: --device auto asks torch")
def test_a_stored_verdict_comes_back_without_importing_torch_or_alembic(tmp_path):
    (tmp_path / "relu").mkdir()
    candidate = tmp_path / "relu" / "cut_off.py"
    candidate.write_text(CUT_OFF)
    env = {**os.environ, "KFORGE_DB": f"sqlite:///{tmp_path / 'k.db'}", "KFORGE_PROBLEMS_DIR": str(tmp_path / "problems")}
    env.pop("KFORGE_DEVICE", None)
    first = subprocess.run([sys.executable, "-m", "kforge", "submit", str(candidate)], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0 and "truncated" in first.stdout, first.stderr
    again = subprocess.run([sys.executable, "-X", "importtime", "-m", "kforge", "submit", str(candidate)], cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "truncated" in again.stdout, again.stderr
    assert "stored verdict(s) of unchanged code on this device taken back" in again.stderr
    imported = set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*([\w.]+)$", again.stderr, re.M))
    assert imported and not {m for m in imported if m.split(".")[0] in ("torch", "alembic")}
