"""What a child pays on the GPU before its model's first call, in fresh processes: `import torch`, CUDA's
initialisation, the context (first allocation), then the first matmul (cuBLAS) and first convolution (cuDNN),
and the device memory the context holds. Decides whether making the context before a child gets its GPU (while
another candidate holds it) would be worth that memory. Prints one JSON object: medians in ms over N processes.

    python benchmarks/cuda_start_cost.py [N]"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

_ONE = r"""
import json, time
t = [time.perf_counter()]
import torch
t.append(time.perf_counter())
torch.cuda.init()
t.append(time.perf_counter())
x = torch.ones(256, 256, device="cuda"); torch.cuda.synchronize()
t.append(time.perf_counter())
(x @ x).sum().item()
t.append(time.perf_counter())
torch.nn.functional.conv2d(x[None, None], torch.ones(1, 1, 3, 3, device="cuda")).sum().item()
t.append(time.perf_counter())
free, total = torch.cuda.mem_get_info()
names = ["import_torch", "cuda_init", "context", "first_matmul", "first_conv"]
print(json.dumps({n: (b - a) * 1e3 for n, a, b in zip(names, t, t[1:])} | {"used_mb": (total - free) / 2**20}))
"""


def runs(n: int, env: dict[str, str] | None = None) -> list[dict]:
    """Each of n fresh processes' start, in ms per step (`env`: theirs, else this process's)."""
    return [json.loads(subprocess.run([sys.executable, "-c", _ONE], env=env, check=True, capture_output=True,
                                      text=True).stdout) for _ in range(n)]


def main(n: int) -> None:
    started = runs(n)
    print(json.dumps({key: round(statistics.median(r[key] for r in started), 1) for key in started[0]} | {"processes": n}))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
