"""NVML's per-process reading on a real GPU: a process's own allocations count, another's do not."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from evaluator.sandbox import gpumemory

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

_HOLD = "import sys, torch; x = torch.empty(int(sys.argv[1]) * 2**20, dtype=torch.uint8, device='cuda'); " \
        "torch.cuda.synchronize(); print('held', flush=True); sys.stdin.read()"


def _holding(mib: int) -> subprocess.Popen:
    env = os.environ | {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0"}
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(mib)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"held"
    return proc


def test_a_process_is_read_with_its_own_allocations_and_without_anothers():
    assert gpumemory.unavailable() == ""
    big, small = _holding(2048), _holding(64)
    idle = subprocess.Popen(["sleep", "60"])  # no context of its own (this test's process has the holders below it)
    try:
        mine, theirs = gpumemory.used_by("0", small.pid), gpumemory.used_by("0", big.pid)
        assert 64 * 2**20 <= mine < 1024 * 2**20, mine  # its 64 MiB and its context, none of the other's 2 GiB
        assert theirs >= 2048 * 2**20, theirs
        assert "lists no process" in gpumemory.used_by("0", idle.pid)
    finally:
        idle.kill()
        for proc in (big, small):
            proc.stdin.close()
            proc.wait(timeout=30)
