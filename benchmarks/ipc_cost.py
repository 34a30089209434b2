"""What one handoff to the comparer costs on a GPU, piece by piece: a producer process exports an output (as a
candidate child does), and this process opens it through evaluator.child.ipc, compares it with an expected tensor as
the comparer does (evaluator.child.correctness.judge_outputs) and closes it. Each handoff of a warm level-1 candidate
cost ~40 ms end to end on the H100 (stage `of_which_comparer`, ~10 handoffs); this says how much of that is the
driver's open and close, how much the comparison, and whether a second open of the same allocation is cheaper.

    python benchmarks/ipc_cost.py [MB ...]      (default 4 64 1024; one JSON line per size, medians in ms)
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import torch  # noqa: E402

from evaluator.child import ipc  # noqa: E402
from evaluator.child.correctness import judge_outputs  # noqa: E402

_PRODUCER = """
import json, sys, torch
sys.path.insert(0, sys.argv[2])
from evaluator.child import ipc
torch.manual_seed(0)
out = torch.rand(int(sys.argv[1]) // 4, device="cuda")
torch.cuda.synchronize()
print(json.dumps(ipc.export(out.data_ptr())), flush=True)
sys.stdin.readline()
"""


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1e3


def measure(nbytes: int, reps: int = 10) -> dict:
    root = str(Path(__file__).resolve().parent.parent)
    producer = subprocess.Popen([sys.executable, "-c", _PRODUCER, str(nbytes), root], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    where = json.loads(producer.stdout.readline())
    torch.manual_seed(0)
    expected = torch.rand(nbytes // 4, device="cuda")
    meta = {"exact_tensor": True, "dtype": "torch.float32", "shape": [nbytes // 4], "device": "cuda"}
    rows = []
    for _ in range(reps):
        opened = ipc.Opened()
        start = time.perf_counter()
        got = opened.open(where, nbytes, 4).view(torch.float32)
        torch.cuda.synchronize()
        opened_ms = _ms(start)
        start = time.perf_counter()
        result = judge_outputs(0, [expected], [meta], [got], [meta], 1e-5, 1e-5, "cuda")
        torch.cuda.synchronize()
        compared_ms = _ms(start)
        start = time.perf_counter()
        del got
        opened.close()
        rows.append((opened_ms, compared_ms, _ms(start)))
        assert result.mismatch is None, result
    producer.stdin.write("\n")
    producer.stdin.flush()
    producer.wait()
    first, rest = rows[0], rows[1:]
    return {"mb": nbytes / 2**20, "first_open_ms": round(first[0], 2), "open_ms": round(statistics.median(r[0] for r in rest), 2),
            "compare_ms": round(statistics.median(r[1] for r in rest), 2), "close_ms": round(statistics.median(r[2] for r in rest), 2)}


if __name__ == "__main__":
    torch.cuda.init()
    for mb in [float(a) for a in sys.argv[1:]] or [4, 64, 1024]:
        print(json.dumps(measure(int(mb * 2**20))), flush=True)
