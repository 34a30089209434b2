"""Does a batch finish faster on every GPU of the host? The same directory on one GPU, then on all of them.

Usage: python benchmarks/multi_gpu.py DIR [--size full|small] [--jobs N] [-n REPEATS]
Builds are warmed first (one untimed pass), so the timed passes measure the GPU stage, not nvcc; then one GPU
and every GPU take turns, REPEATS times each. Prints one JSON object: each pass's wall time, the verdicts'
statuses (which must match), how many ran on each GPU and each GPU's busy fraction (nvidia-smi every 0.5 s).
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import tempfile
import time
from pathlib import Path

from eval_speed import _jobs
from kernelbench_throughput import Sampler

from evaluator import EvalSettings, evaluate
from evaluator.hardware import visible_gpus


def _pass(jobs, settings: EvalSettings) -> dict:
    start = time.perf_counter()
    with Sampler("cuda", settings.gpus) as sampler:
        verdicts = list(evaluate(jobs, settings))
    busy = sampler.report()["gpu_busy_fraction"]
    return {"wall_s": round(time.perf_counter() - start, 2), "gpus": settings.gpus, "gpu_busy_fraction": busy,
            "statuses": {Path(v.solution_path).name: v.status.value for v in verdicts},
            "per_gpu": dict(collections.Counter(v.evidence.gpu for v in verdicts))}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("directory", type=Path)
    parser.add_argument("--size", default="full")
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("-n", "--repeats", type=int, default=1)
    args = parser.parse_args()
    jobs, gpus = _jobs(args.directory), visible_gpus()
    base = EvalSettings(device="cuda", size=args.size, jobs=args.jobs, build_root=Path(tempfile.mkdtemp(prefix="kforge-mgpu-")))
    list(evaluate(jobs, base))  # warm the build cache
    one, every = [], []
    for _ in range(args.repeats):
        one.append(_pass(jobs, base.model_copy(update={"gpus": gpus[:1]})))
        every.append(_pass(jobs, base.model_copy(update={"gpus": gpus})))
    median = {name: statistics.median(p["wall_s"] for p in passes) for name, passes in (("one", one), ("every", every))}
    print(json.dumps({"candidates": len(jobs), "one_gpu": one, "every_gpu": every,
                      "same_verdicts": all(p["statuses"] == one[0]["statuses"] for p in one + every),
                      "median_wall_s": median, "speedup": round(median["one"] / median["every"], 3)}, indent=1))


if __name__ == "__main__":
    main()
