"""Does a batch finish faster on every GPU of the host? The same directory on one GPU, then on all of them.

Usage: python benchmarks/multi_gpu.py DIR [--size full|small] [--jobs N]
Builds are warmed first (one untimed pass), so both timed passes measure the GPU stage, not nvcc. Prints one
JSON object: wall time per pass, the verdicts' statuses (which must match) and how many ran on each GPU.
"""

from __future__ import annotations

import argparse
import collections
import json
import tempfile
import time
from pathlib import Path

from eval_speed import _jobs

from evaluator import EvalSettings, evaluate
from evaluator.hardware import visible_gpus


def _pass(jobs, settings: EvalSettings) -> dict:
    start = time.perf_counter()
    verdicts = list(evaluate(jobs, settings))
    return {"wall_s": time.perf_counter() - start, "gpus": settings.gpus,
            "statuses": {Path(v.solution_path).name: v.status.value for v in verdicts},
            "per_gpu": dict(collections.Counter(v.evidence.gpu for v in verdicts))}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("directory", type=Path)
    parser.add_argument("--size", default="full")
    parser.add_argument("--jobs", type=int, default=16)
    args = parser.parse_args()
    jobs, gpus = _jobs(args.directory), visible_gpus()
    base = EvalSettings(device="cuda", size=args.size, jobs=args.jobs, build_root=Path(tempfile.mkdtemp(prefix="kforge-mgpu-")))
    list(evaluate(jobs, base))  # warm the build cache
    one = _pass(jobs, base.model_copy(update={"gpus": gpus[:1]}))
    every = _pass(jobs, base.model_copy(update={"gpus": gpus}))
    print(json.dumps({"candidates": len(jobs), "one_gpu": one, "every_gpu": every,
                      "same_verdicts": one["statuses"] == every["statuses"],
                      "speedup": one["wall_s"] / every["wall_s"]}, indent=1))


if __name__ == "__main__":
    main()
