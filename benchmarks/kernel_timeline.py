"""Where the time of one forward goes on the GPU timeline: kernels, the gaps between them, and the host calls in the gaps.

Usage: python benchmarks/kernel_timeline.py CANDIDATE.py PROBLEM [N]
Times N calls the way kforge does (L2 flush, then CUDA events around the call) under the PyTorch profiler
(CUPTI, the source nsys reads) and prints one JSON object per call: the event time, the sum of kernel, memset
and memcpy durations (ncu's gpu__time_duration adds up only the kernels: ms_by_kind splits them), the span
from the first one's start to the last one's end, and the host runtime calls slower than 50 us made during
the call (a cudaMalloc or a synchronize there leaves the GPU idle inside the timed region). Event time ~ span >> kernel sum means the gaps
are real GPU idle time inside the call, which a speedup must count and a kernel-only profiler does not.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from evaluator.child import loading, trials
from ncu_compare import kforge_build_dir, reuse_kforge_build
from reference_problems import resolve_problem

_GPU_CATEGORIES = {"kernel", "gpu_memset", "gpu_memcpy"}
_SLOW_HOST_US = 50.0


def _timed_calls(model, inputs, calls: int) -> list[float]:
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
    for i, (start, end) in enumerate(pairs):
        flush.zero_()
        with record_function(f"kforge_call_{i}"):
            start.record()
            model(*inputs)
            end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in pairs]


def _per_call(trace: list[dict], event_ms: list[float]) -> list[dict]:
    gpu = {e.get("args", {}).get("correlation"): e for e in trace if e.get("cat") in _GPU_CATEGORIES}
    runtime = [e for e in trace if e.get("cat") == "cuda_runtime"]
    rows = []
    for i, ms in enumerate(event_ms):
        call = next(e for e in trace if e.get("name") == f"kforge_call_{i}" and e.get("cat") == "user_annotation")
        lo, hi = call["ts"], call["ts"] + call["dur"]
        host = [e for e in runtime if lo <= e["ts"] <= hi]
        work = [gpu[c] for c in (e.get("args", {}).get("correlation") for e in host) if c in gpu]
        starts, ends = [w["ts"] for w in work], [w["ts"] + w["dur"] for w in work]
        by_kind = {kind: sum(w["dur"] for w in work if w["cat"] == kind) / 1e3 for kind in sorted(_GPU_CATEGORIES)}
        rows.append({"call": i, "event_ms": ms, "kernel_sum_ms": sum(w["dur"] for w in work) / 1e3, "ms_by_kind": by_kind,
                     "span_ms": (max(ends) - min(starts)) / 1e3 if work else 0.0, "gpu_ops": len(work),
                     "slow_host_calls": [(e["name"], round(e["dur"] / 1e3, 3)) for e in host if e["dur"] > _SLOW_HOST_US]})
    return rows


def main() -> None:
    candidate, problem_name = Path(sys.argv[1]), sys.argv[2]
    calls = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    problem = loading.load_problem(resolve_problem(problem_name).path, {})
    os.environ["TORCH_EXTENSIONS_DIR"] = str(kforge_build_dir(candidate))
    reuse_kforge_build()
    module = loading.import_file(candidate, "kforge_candidate")
    model = trials.build_model(module.ModelNew, problem, 0, "cuda")
    inputs = trials.make_inputs(problem, 1, "cuda")
    with torch.no_grad():
        for _ in range(3):
            model(*inputs)  # warm: module load, allocator growth and first-call setup stay outside
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            event_ms = _timed_calls(model, inputs, calls)
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        trace = json.loads(Path(f.name).read_text())["traceEvents"]
    for row in _per_call(trace, event_ms):
        print(json.dumps({"candidate": candidate.name, **row}))


if __name__ == "__main__":
    main()
