"""Where a small CUDA call's timed window goes (GPU only): the window as kforge's loop times it, beside the same
loop with a hold (a spin kernel queued ahead of each rep) and with the L2 flushed by a read, against the kernels'
own durations by CUPTI (torch.profiler) and, with --ncu, by Nsight Compute.

Usage: python benchmarks/cuda_window_probe.py [CANDIDATE.py] [--reps 40] [--json OUT.json]
       ncu --clock-control none --cache-control all -k regex:'relu_scale_add|vectorized_elementwise' \
           --metrics gpu__time_duration.sum --csv python benchmarks/cuda_window_probe.py CANDIDATE.py --ncu

The problem is tests/problems/relu_scale_add.py (256 x 16384 fp32); the reference's three eager ops and the
candidate's ModelNew (without a file: torch.add(y, x, alpha=2), one kernel moving the fused kernel's bytes) are timed in alternating rounds of 5 reps in one process, with a pause between rounds as
the parent's pacing leaves one. Prints one JSON object: per loop variant the median window of each side, their
ratio, the host's span per rep, and the CUPTI sum of each side's kernels per call.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from evaluator.child import timing  # noqa: E402

ROUND = 5
SHAPE = (256, 16384)
HARNESS_KERNELS = ("FillFunctor", "normal", "distribution", "copy", "Memcpy", "sleep", "spin", "reduce")


def _load(path: str):
    spec = importlib.util.spec_from_file_location("probe_candidate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ModelNew(2.0).cuda()


def _clock() -> int | None:
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetClockInfo(pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.NVML_CLOCK_SM)
    except Exception:  # noqa: BLE001 - a probe: no NVML, no clock column
        return None


def _round(fn, inputs, flush, variant: str, hold_s: float) -> tuple[list[float], list[float]]:
    """One round of ROUND reps as timing._cuda_round takes them (fill, flush, events around the call and the
    glimpse, a snapshot after), with the variant's changes; (windows in ms, host spans in us)."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(ROUND)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(ROUND)]
    spans, kept = [], []
    for start, end in zip(starts, ends):
        began = time.perf_counter()
        if "hold" in variant:
            torch.cuda._sleep(int(hold_s * 3e9))
        for t in inputs:
            t.normal_()
        if "readflush" in variant:
            flush.sum(dtype=torch.int32)
        else:
            flush.zero_()
        start.record()
        out = fn()
        if "noglimpse" not in variant:
            timing.glimpse(out, "cuda")
        end.record()
        spans.append((time.perf_counter() - began) * 1e6)
        kept.append(out.clone())
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)], spans


def _kernels(prof) -> list[tuple[str, float]]:
    found = []
    for e in prof.events():
        if str(getattr(e, "device_type", "")).endswith("CUDA"):
            found.append((e.name, e.time_range.start, e.time_range.elapsed_us()))
    return [(name, dur) for name, _, dur in sorted(found, key=lambda k: k[1])]


def _call_us(kernels: list[tuple[str, float]], calls: int) -> float:
    """The CUPTI time of the call's own kernels per call (the harness's fills, flushes, copies and spins left out)."""
    own = [d for name, d in kernels if not any(h in name for h in HARNESS_KERNELS)]
    return sum(own) / max(1, calls)


def variant_report(sides: dict, inputs, flush, variant: str, reps: int, gap_s: float, hold_s: float) -> dict:
    windows = {k: [] for k in sides}
    spans = {k: [] for k in sides}
    ratios = []
    clocks = []
    for r in range(reps // ROUND):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        medians = {}
        clocks.append(_clock())
        for name in order:
            w, s = _round(sides[name], inputs, flush, variant, hold_s)
            windows[name] += w
            spans[name] += s
            medians[name] = statistics.median(w)
            time.sleep(gap_s)
        ratios.append(medians["reference"] / medians["candidate"])
    out = {"variant": variant, "clock_mhz": clocks, "pair_ratios": [round(x, 4) for x in ratios],
           "ratio": statistics.median(ratios)}
    for name in sides:
        w = sorted(windows[name])
        out[name] = {"median_ms": statistics.median(w), "p10_ms": w[len(w) // 10], "p90_ms": w[9 * len(w) // 10],
                     "host_span_us": statistics.median(spans[name]), "host_span_p90_us": sorted(spans[name])[9 * len(w) // 10],
                     "windows_ms": [round(x, 5) for x in windows[name]]}
    return out


def cupti(sides: dict, inputs, flush, variant: str, hold_s: float) -> dict:
    from torch.profiler import ProfilerActivity, profile
    found = {}
    for name, fn in sides.items():
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(4):
                _round(fn, inputs, flush, variant, hold_s)
        kernels = _kernels(prof)
        found[name] = {"call_us": _call_us(kernels, 4 * ROUND),
                       "kernels": sorted({n[:90] for n, _ in kernels})}
    return found


def ramp(fn, inputs, flush, idle_s: float, reps: int) -> dict:
    """Windows of back-to-back reps right after the GPU sat idle for idle_s (clocks as the driver left them)."""
    torch.cuda.synchronize()
    time.sleep(idle_s)
    before = _clock()
    windows = []
    for _ in range(reps // ROUND):
        windows += _round(fn, inputs, flush, "now", 0.0)[0]
    return {"idle_s": idle_s, "clock_before_mhz": before, "clock_after_mhz": _clock(),
            "first5_ms": [round(x, 5) for x in windows[:5]], "median_after_20_ms": statistics.median(windows[20:])}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("candidate", nargs="?")
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--gap-ms", type=float, default=20.0)
    parser.add_argument("--hold-ms", type=float, default=0.5)
    parser.add_argument("--ncu", action="store_true", help="only call each side 20 times (for ncu's kernel durations)")
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    x, y = torch.randn(*SHAPE, device="cuda"), torch.randn(*SHAPE, device="cuda")
    model = _load(args.candidate) if args.candidate else (lambda a, b: torch.add(b, a, alpha=2.0))
    with torch.no_grad():
        sides = {"reference": lambda: torch.relu(x) * 2.0 + y, "candidate": lambda: model(x, y)}
        if args.ncu:
            for _ in range(20):
                for fn in sides.values():
                    fn()
            torch.cuda.synchronize()
            return
        flush = timing.flush_buffer("cuda")
        for fn in sides.values():  # warm: module load, allocator
            for _ in range(50):
                fn()
        torch.cuda.synchronize()
        hold_s = args.hold_ms / 1e3
        report = {"device": torch.cuda.get_device_name(), "ramp_idle_2s": ramp(sides["candidate"], [x, y], flush, 2.0, 40)}
        variants = ["now", "now_noglimpse", "hold", "hold_readflush", "now_nogap"]
        report["variants"] = [variant_report(sides, [x, y], flush, v.replace("_nogap", ""), args.reps,
                                             0.0 if v.endswith("nogap") else args.gap_ms / 1e3, hold_s) for v in variants]
        report["variants"][-1]["variant"] = "now_nogap"
        report["cupti"] = {v: cupti(sides, [x, y], flush, v, hold_s) for v in ("now", "hold", "hold_readflush")}
    text = json.dumps(report)
    if args.json:
        Path(args.json).write_text(text)
    summary = {"device": report["device"], "ramp": report["ramp_idle_2s"],
               "variants": [{k: (v if k not in ("reference", "candidate") else {kk: vv for kk, vv in v.items() if kk != "windows_ms"})
                             for k, v in row.items()} for row in report["variants"]],
               "cupti_call_us": {v: {s: round(d["call_us"], 2) for s, d in found.items()} for v, found in report["cupti"].items()},
               "kernels": report["cupti"]["now"]}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
