"""Run a candidate's forward N times inside an NVTX range, for Nsight Compute to time its kernels.

Usage: ncu --nvtx --nvtx-include "kforge_forward/" --metrics gpu__time_duration.sum --csv --clock-control none \
           python benchmarks/ncu_forward.py CANDIDATE.py PROBLEM [N]
Compare the per-call sum of gpu__time_duration with kforge's median (benchmarks/ncu_compare.py does both).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from evaluator.child import loading, trials
from ncu_compare import reuse_kforge_build
from reference_problems import resolve_problem


def main() -> None:
    candidate, problem_name = Path(sys.argv[1]), sys.argv[2]
    calls = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    problem = loading.load_problem(resolve_problem(problem_name).path, {})
    reuse_kforge_build()
    module = loading.import_file(candidate, "kforge_candidate")
    model = trials.build_model(module.ModelNew, problem, 0, "cuda")
    inputs = trials.make_inputs(problem, 1, "cuda")
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    with torch.no_grad():
        model(*inputs)  # warm: module load and first-call setup stay outside the range
        for _ in range(calls):
            flush.zero_()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_push("kforge_forward")
            model(*inputs)
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()


if __name__ == "__main__":
    main()
