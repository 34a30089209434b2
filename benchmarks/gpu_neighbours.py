"""Whether work on one GPU slows what kforge does on another of the same host. On two H200s every stage of a warm
level-1 candidate's hold ran slower than on one (correctness +24 %, timed rounds +8 %, mean of 100), and children
took 0.88 s to load against 0.56 s, while kforge's own process used under 8 % of a core. The suspects are the
driver's host-wide work: CUDA contexts made and torn down (every child), IPC handles opened and closed (every
handoff to the comparer).

On GPU 0 this times a handoff (benchmarks/ipc_cost.py: open, compare, close of 256 MB), a burst of small kernels
each waited for, and a fresh process's CUDA start (benchmarks/cuda_start_cost.py), while next to it runs:
nothing; a churn of fresh processes each making a CUDA context on GPU 1 (or GPU 0) and exiting, as children load
and end; or a producer on GPU 1 whose output another process opens and closes over IPC in a loop.

    python benchmarks/gpu_neighbours.py [REPS]      (one JSON line per neighbour; medians in ms)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cuda_start_cost  # noqa: E402
import ipc_cost  # noqa: E402
import torch  # noqa: E402

ROOT = str(Path(__file__).resolve().parent.parent)
_CHURN = "import torch; torch.empty(1, device='cuda'); torch.cuda.synchronize()"
_IPC_LOOP = """
import sys
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[1] + "/benchmarks")
import ipc_cost
while True:
    ipc_cost.measure(256 * 2**20, reps=4)
"""


def _neighbour(kind: str) -> subprocess.Popen | None:
    """A process that keeps the neighbour's work going until killed (its GPU by CUDA_VISIBLE_DEVICES)."""
    if kind == "none":
        return None
    gpu = kind.rsplit("_gpu", 1)[1]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu}
    code = (f"import subprocess, sys\nwhile True: subprocess.run([sys.executable, '-c', {_CHURN!r}])"
            if kind.startswith("contexts") else _IPC_LOOP)
    return subprocess.Popen([sys.executable, "-c", code, ROOT], env=env, start_new_session=True)


def _kernels_ms(reps: int) -> float:
    """Median ms of 20 small kernels, each synchronised: the host-device round trips the harness makes."""
    x = torch.ones(1024, device="cuda")
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(20):
            x.add_(1)
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _start_ms(n: int) -> float:
    """Median ms of a fresh process's CUDA start on GPU 0: initialisation and its first allocation."""
    runs = cuda_start_cost.runs(n, {**os.environ, "CUDA_VISIBLE_DEVICES": "0"})
    return statistics.median(r["cuda_init"] + r["context"] for r in runs)


def main(reps: int) -> None:
    kinds = ["none", "contexts_gpu1", "ipc_gpu1", "contexts_gpu0"] if torch.cuda.device_count() > 1 else ["none", "contexts_gpu0"]
    torch.cuda.set_device(0)
    for kind in kinds:
        neighbour = _neighbour(kind)
        try:
            time.sleep(2.0)  # the neighbour under way
            handoff = ipc_cost.measure(256 * 2**20, reps=reps)
            row = {"neighbour": kind, "handoff_open_ms": handoff["open_ms"], "handoff_compare_ms": handoff["compare_ms"],
                   "handoff_close_ms": handoff["close_ms"], "kernels_20_synced_ms": round(_kernels_ms(reps), 2),
                   "cuda_start_ms": round(_start_ms(max(3, reps // 4)), 1)}
        finally:
            if neighbour is not None:
                os.killpg(neighbour.pid, 9)
                neighbour.wait()
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
