"""Is kforge's timer right? Hot vs L2-flushed, first call vs steady state, and run-to-run spread (GPU only).

Usage: python benchmarks/gpu_timing_check.py   (prints one JSON object)
"""

from __future__ import annotations

import json
import time

import torch

from evaluator.timing import bench, summarize


def _first_call_ms(fn) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3


def _conv1d_tf32() -> dict[str, float]:
    """The seeds' conv1d problem, eager, with cuDNN's TF32 on (PyTorch's default) and off (kforge's judging mode)."""
    conv = torch.nn.Conv1d(64, 128, 3, bias=False, device="cuda")
    x = torch.randn(32, 64, 131072, device="cuda")
    times = {}
    with torch.no_grad():
        for tf32 in (True, False):
            torch.backends.cudnn.allow_tf32 = tf32
            times[f"tf32_{tf32}"] = summarize(bench(lambda: conv(x), "cuda", 100, 500, 10, 500), "events").median_ms
    return times


def main() -> None:
    small = torch.rand(4 * 2**20, device="cuda")  # 16 MB: fits the H100's 50 MB L2
    big = torch.rand(2**30 // 4 * 4, device="cuda")  # 4 GB: streams from HBM
    fresh = torch.rand(8 * 2**20, device="cuda")
    first = _first_call_ms(lambda: torch.special.erfcx(fresh))  # a kernel never launched before: includes module load
    report = {"first_call_ms": first}
    for name, fn in {"sum_16MB": lambda: small.sum(), "sum_4GB": lambda: big.sum(),
                     "erfcx_32MB": lambda: torch.special.erfcx(fresh)}.items():
        flushed = [summarize(bench(fn, "cuda", 100, 500, 10, 2000), "events").median_ms for _ in range(5)]
        hot = summarize(bench(fn, "cuda", 100, 500, 10, 2000, flush_l2=False), "events").median_ms
        mean = sum(flushed) / len(flushed)
        cv = (sum((x - mean) ** 2 for x in flushed) / len(flushed)) ** 0.5 / mean
        report[name] = {"flushed_medians_ms": flushed, "cv_of_medians": cv, "hot_median_ms": hot,
                        "flushed_over_hot": mean / hot}
    report["conv1d_eager_ms"] = _conv1d_tf32()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
