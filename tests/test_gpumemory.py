"""The leak check's device memory is the candidate's own: whose processes count, and what the judge does with
the reading. The reading itself (NVML) is tested on a GPU host: tests/gpu/test_gpu_nvml.py."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evaluator.sandbox import gpumemory
from evaluator.contracts import EvalSettings, Status
from evaluator.parent.jail_spec import jail_spec, probe_layers
from evaluator.verdict.case import Case, Reference
from evaluator.verdict.rules import _leak
from evaluator.sandbox.results import ChildResult
from evaluator.sandbox.spawn import _JAIL, _carrying, scrubbed_env
from reference_problems import resolve_problem

MIB = 2**20

# the jail's command: a daemon (double fork, new session) that outlives its parent, then the command exits
_ORPHAN = ("import os, time\n"
           "if os.fork() == 0:\n"
           "    os.setsid()\n"
           "    if os.fork() == 0:\n"
           "        time.sleep(60)\n"
           "    os._exit(0)\n"
           "os.wait()\n"
           "print('orphaned', flush=True)\n"
           "time.sleep(60)\n")


@pytest.mark.skipif(not probe_layers(Path("/tmp")).get("pid", "").startswith("on"), reason="no PID namespace here")
def test_a_jailed_childs_orphan_still_descends_from_the_process_kforge_started(tmp_path):
    """A daemon of the candidate is adopted inside its PID namespace, so its device memory is still counted as the
    candidate's; kforge's own process is not below the child."""
    token = "gpumemory-test-" + os.urandom(4).hex()
    spec = jail_spec([tmp_path], [], namespaces=True)
    proc = subprocess.Popen([sys.executable, str(_JAIL), json.dumps(spec), "--", sys.executable, "-c", _ORPHAN],
                            cwd=tmp_path, env=scrubbed_env(tmp_path, tmp_path, token), stdout=subprocess.PIPE,
                            start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == b"orphaned"
        deadline = time.monotonic() + 10
        while len(found := _carrying(token)) < 2 and time.monotonic() < deadline:  # the command and its daemon
            time.sleep(0.05)
        assert len(found) >= 2, found
        assert all(gpumemory._descends(pid, proc.pid) for pid in found)
        assert not gpumemory._descends(os.getpid(), proc.pid)
    finally:
        for pid in _carrying(token):
            with contextlib.suppress(ProcessLookupError):  # the namespace's first process took the rest with it
                os.kill(pid, 9)
        proc.wait(timeout=10)


def _judged_leak(driver_mib: int, own: gpumemory.ProcessMemory) -> tuple | None:
    """The leak check on a GPU where the device's used memory grew `driver_mib` in each window (another
    process's), and the parent read `own` for the candidate's processes."""
    growth = {"host_rss": [0, 0], "cuda_allocated": [0, 0], "cuda_reserved": [0, 0],
              "cuda_driver_used": [driver_mib * MIB, driver_mib * MIB]}
    result = ChildResult(messages=[{"event": "leaks", "growth": growth, "calls": 10, "_t": 0.0}], log_path=Path("/x"))
    case = Case(result, Reference(meta={}, trials={}), resolve_problem("relu").meta, EvalSettings(device="cuda"), {},
                 None, own)
    found = _leak(case)
    return found and (found.status, found.evidence.exploit or found.evidence.leaked_bytes)


def _read(*readings: int, asked: int = 3, why: str = "") -> gpumemory.ProcessMemory:
    return gpumemory.ProcessMemory(lambda: None, 1, asked=asked, readings=[r * MIB for r in readings], why=why)


def test_the_judge_counts_the_candidates_own_device_memory_not_the_devices():
    assert _judged_leak(600, _read(700, 700, 702)) is None  # 600 MiB of other submitters, 2 MiB of its own: no leak
    assert _judged_leak(0, _read(700, 740, 780)) == (Status.LEAK, {"cuda_process_used": 40 * MIB})  # raw cudaMalloc
    assert _judged_leak(0, _read(700, 740, 740)) is None  # a one-time workspace grows only in the first window
    # where the parent could not read the candidate's own processes, the device's used memory is what is judged
    assert _judged_leak(600, _read(asked=3, why="NVML: not here")) == (Status.LEAK, {"cuda_driver_used": 600 * MIB})
    # a harness that skipped a mark was changed by the candidate: its own numbers would be all that is left
    assert _judged_leak(0, _read(700, 700, asked=2)) == (Status.CHEAT, "forged_messages")


def test_the_parent_says_why_it_has_no_reading():
    memory = gpumemory.ProcessMemory(lambda: None, os.getpid())
    assert memory({"event": "leak_mark", "which": 0}).ack == "mark 0"
    assert (memory.asked, memory.growth()) == (1, "no GPU")
    assert _read(1, 2).growth() == "2 of the leak check's 3 marks were read"
    assert _read(5, 7, 20).growth() == (2 * MIB, 13 * MIB)
