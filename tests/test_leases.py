"""Device leases across kforge processes, as users on one machine meet them: real processes take the CPU's lease,
a `kforge evaluate` that finds it held says at once for what it waits, behind whom and at which place, `kforge
status` lists the holder and the line, and the wait ends up in the verdict's evidence and the batch summary."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

from conftest import ROOT, kforge_runner

# takes the CPU's lease (waiting its turn like any kforge process), says so, holds it until its stdin closes
_HOLDER = """
import sys, time
from evaluator.parent.leases import Lease
lease = Lease(None)
while (fd := lease.take()) is None:
    time.sleep(0.05)
print("held", flush=True)
sys.stdin.read()
Lease.give_back(fd)
"""
_CANDIDATE = """import ctypes  # could load a kernel: judged by running it, on the CPU this test holds
import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""


def _python(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _lines_with_times(stream, into: list[tuple[float, str]]) -> threading.Thread:
    """Each line of `stream` with the time it arrived, read in the background."""
    def read():
        for line in stream:
            into.append((time.time(), line))
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def _until(found, timeout: float = 300.0):
    deadline = time.monotonic() + timeout
    while not (got := found()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return got


def _status(kforge) -> dict:
    return {d["device"]: d for d in json.loads(kforge("status", "--json").stdout)}


def test_a_waiting_evaluate_says_whom_it_waits_for_and_status_shows_the_line(tmp_path, build_root):
    kforge = kforge_runner(tmp_path, build_root)
    holder = _python(_HOLDER)
    evaluate = later = None
    try:
        assert holder.stdout.readline() == "held\n"
        candidate = tmp_path / "relu" / "plain.py"
        candidate.parent.mkdir()
        candidate.write_text(_CANDIDATE)
        evaluate = subprocess.Popen([sys.executable, "-m", "kforge", "evaluate", str(candidate.parent), "--device",
                                     "cpu", "--json"], env=kforge.env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
        said: list[tuple[float, str]] = []
        reader = _lines_with_times(evaluate.stderr, said)
        waits = _until(lambda: [(t, line) for t, line in said if "waiting for device cpu" in line])
        assert waits, "".join(line for _, line in said)
        (at, line), = waits
        assert f"held by pid {holder.pid} (-c)" in line and "place " in line
        queue = _status(kforge)["cpu"]["queue"]
        mine = next(t for t in queue if t["pid"] == evaluate.pid)
        assert at - mine["since"] < 1.0  # said within a second of joining the line
        assert f"place {queue.index(mine) + 1} in line" in line
        later = _python(_HOLDER)
        shown = _until(lambda: any(t["pid"] == later.pid for t in _status(kforge)["cpu"]["queue"]), 30)
        assert shown
        cpu = _status(kforge)["cpu"]
        assert cpu["holder"]["pid"] == holder.pid
        pids = [t["pid"] for t in cpu["queue"]]
        assert pids.index(evaluate.pid) < pids.index(later.pid)  # first come, first in line
        text = kforge("status").stdout
        assert f"cpu: held by pid {holder.pid}" in text and f"pid {evaluate.pid} (kforge evaluate" in text
        time.sleep(1.0)
        holder.stdin.close()  # the holder gives the CPU back: the evaluate, first in line, takes it
        output = evaluate.stdout.read()  # stderr is the reader's alone: communicate() would take its last lines
        evaluate.wait(timeout=600)
        reader.join(timeout=30)
        assert evaluate.returncode in (0, 1), "".join(line for _, line in said)
        verdict = json.loads(output.splitlines()[-1])
        assert later.stdout.readline() == "held\n"  # then the later one, once the evaluate gave it back
        shown = json.loads(kforge("show", verdict["solution_sha256"], "--json").stdout)
        assert shown[0]["evidence"]["stage_s"]["device_wait"] >= 1.0
        assert any("waited" in line and "for devices other kforge processes held" in line for _, line in said)
    finally:
        for proc in (holder, evaluate, later):
            if proc is not None:
                proc.kill()
                proc.wait()
