"""Candidates per hour per GPU on KernelBench at its own sizes: one compiled candidate per problem, ONE batch.

Usage: python benchmarks/kernelbench_throughput.py KERNELBENCH_DIR [--level 1] [--ids 1-6,19] [--modes cold,warm]
       [--jobs N] [--device cuda] [--out FILE.json] [--trace FILE.json]
       (a mode may name how many of the visible GPUs it uses: cold,warm:1,warm:2; by default all of them)

Each candidate is the problem's own source with `ModelNew(Model)` whose forward copies every output through a real
CUDA (or C++ on CPU) kernel built with load_inline: a plausible candidate that goes through every stage (compile,
correctness, leak, timing, probe). Verdicts do not matter here; cost does. `cold` uses an empty build cache, `warm`
the same batch again. Reported per mode: wall seconds, candidates/hour/GPU, when the first verdict came and the
seconds per candidate per GPU after it, the CPU kforge's own process used (a share of one core: its threads share
one interpreter), statuses, median seconds per stage,
each GPU's busy fraction and the batch's idle fraction (samples where any of its GPUs was idle: nvidia-smi every
0.5 s), peak GPU memory, how many candidates each GPU ran, peak host memory used (MemTotal - MemAvailable,
which counts tmpfs and shared memory) above the baseline, the peak summed RSS of kforge's processes, and the
cores' mean clock (/proc/cpuinfo; a VM may show a fixed one) and busy share (median, 10th and 90th percentile).
Progress (one line per verdict) goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import hold_trace  # noqa: E402
from evaluator import CandidateJob, EvalSettings, evaluate  # noqa: E402
from evaluator.hardware import visible_gpus  # noqa: E402
from evaluator.sandbox.spawn import start_children  # noqa: E402
from reference_problems.registry import load_problem_file  # noqa: E402

_CUDA = '''
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void copy_words(const int4* __restrict__ src, int4* __restrict__ dst, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) dst[i] = src[i];
}
__global__ void copy_bytes(const uint8_t* __restrict__ src, uint8_t* __restrict__ dst, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) dst[i] = src[i];
}
torch::Tensor copy(torch::Tensor x) {
    x = x.contiguous();
    auto y = torch::empty_like(x);
    int64_t n = x.numel() * x.element_size();
    if (n == 0) return y;
    auto stream = at::cuda::getCurrentCUDAStream();
    int64_t blocks = std::min<int64_t>((n + 4095) / 4096 + 1, 132 * 32);
    if (n % 16 == 0) copy_words<<<blocks, 256, 0, stream>>>((const int4*)x.data_ptr(), (int4*)y.data_ptr(), n / 16);
    else copy_bytes<<<blocks, 256, 0, stream>>>((const uint8_t*)x.data_ptr(), (uint8_t*)y.data_ptr(), n);
    return y;
}
'''
_CPP = '''
#include <torch/extension.h>
#include <cstring>
torch::Tensor copy(torch::Tensor x) {
    x = x.contiguous();
    auto y = torch::empty_like(x);
    std::memcpy(y.data_ptr(), x.data_ptr(), x.numel() * x.element_size());
    return y;
}
'''
_MODEL_NEW = '''

# ---- kforge throughput candidate: the problem's Model, each output copied by a compiled kernel ----
from torch.utils.cpp_extension import load_inline as _load_inline

_copy_ext = _load_inline(name="kb_copy_{tag}", {sources}, functions=["copy"], verbose=False)


def _copied(value):
    if isinstance(value, torch.Tensor):
        return _copy_ext.copy(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_copied(v) for v in value)
    return value


class ModelNew(Model):
    def forward(self, *args):
        return _copied(super().forward(*args))
'''


def problem_ids(text: str | None) -> set[int] | None:
    """'1-6,19,34-39' -> those problem numbers; None (all) for no text."""
    if not text:
        return None
    ids = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        if not (low.isdigit() and (high or low).isdigit()):
            raise argparse.ArgumentTypeError(f"not a problem number or range: {part!r} (e.g. 1-6,19,34-39)")
        ids.update(range(int(low), int(high or low) + 1))
    return ids


def _number(path: Path) -> int:
    """A KernelBench problem file's number: 19 for 19_ReLU.py."""
    return int(path.name.split("_")[0])


def write_candidates(kernelbench: Path, level: int, ids: set[int] | None, out: Path, device: str) -> list[CandidateJob]:
    """KernelBench's run-directory layout: level_L_problem_P_sample_0_kernel.py, one per problem."""
    files = sorted((p for p in (kernelbench / f"level{level}").glob("*.py") if ids is None or _number(p) in ids), key=_number)
    sources = (f'cpp_sources="torch::Tensor copy(torch::Tensor x);", cuda_sources={_CUDA!r}' if device == "cuda"
               else f"cpp_sources={_CPP!r}, extra_cflags=['-O2']")
    jobs = []
    for path in files:
        pid = _number(path)
        text = path.read_text()
        body = _MODEL_NEW.format(tag=f"l{level}p{pid}", sources=sources)
        target = out / f"level_{level}_problem_{pid}_sample_0_kernel.py"
        target.write_text(text + ("\nimport torch\n" if "import torch\n" not in text else "") + body)
        jobs.append(CandidateJob(path=target, problem=load_problem_file(path)))
    return jobs


class Sampler:
    """Host memory used (above the start), kforge's summed RSS, GPU memory/utilisation, and the cores' mean clock
    and busy share (whether compiles beside the judging cost it clock), every 0.5 s."""

    def __init__(self, device: str, gpus: list[str]):
        self.device, self.gpus, self.stop = device, gpus, threading.Event()
        self.base = self._used()
        self.host_peak = self.rss_peak = self.gpu_mem_peak = 0
        self.gpu_samples: list[dict[str, int]] = []  # per sample: utilisation of each GPU of the batch
        self.cpu_samples: list[tuple[float, float]] = []  # per sample: the cores' mean MHz, their busy share
        self.cpu_times = self._cpu_times()
        self.thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _used() -> int:
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        return (int(info["MemTotal"].split()[0]) - int(info["MemAvailable"].split()[0])) * 1024

    @staticmethod
    def _tree_rss(root: int) -> int:
        children: dict[int, list[int]] = {}
        rss: dict[int, int] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(entry.name))
                rss[int(entry.name)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
            except (OSError, IndexError, ValueError):
                continue
        total, todo = 0, [root]
        while todo:
            pid = todo.pop()
            total += rss.get(pid, 0)
            todo += children.get(pid, [])
        return total

    @staticmethod
    def _cpu_times() -> tuple[int, int]:
        """(busy, all) jiffies of every core together, from /proc/stat."""
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(fields) - fields[3] - fields[4], sum(fields)  # idle and iowait are not busy

    def _cpu(self) -> None:
        mhz = [float(line.split(":")[1]) for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("cpu MHz")]
        (busy, total), (busy0, total0) = self._cpu_times(), self.cpu_times
        self.cpu_times = (busy, total)
        if mhz and total > total0:
            self.cpu_samples.append((statistics.mean(mhz), (busy - busy0) / (total - total0)))

    def _gpu(self) -> None:
        if self.device != "cuda":
            return
        lines = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,utilization.gpu", "--format=csv,noheader,nounits",
                                "-i", ",".join(self.gpus)], capture_output=True, text=True).stdout.strip().splitlines()
        rows = [line.split(",") for line in lines]
        if len(rows) == len(self.gpus) and all(len(row) == 2 for row in rows):
            self.gpu_mem_peak = max([self.gpu_mem_peak] + [int(row[0]) * 2**20 for row in rows])
            self.gpu_samples.append({gpu: int(row[1]) for gpu, row in zip(self.gpus, rows)})

    def _run(self) -> None:
        while not self.stop.wait(0.5):
            self.host_peak = max(self.host_peak, self._used() - self.base)
            self.rss_peak = max(self.rss_peak, self._tree_rss(os.getpid()))
            self._gpu()
            self._cpu()

    def __enter__(self) -> "Sampler":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()

    def report(self) -> dict:
        n = len(self.gpu_samples)
        idle = sum(0 in sample.values() for sample in self.gpu_samples) / n if n else None
        busy = {gpu: round(sum(sample[gpu] > 0 for sample in self.gpu_samples) / n, 3) for gpu in self.gpus} if n else None
        return {"host_used_peak_gb": round(self.host_peak / 1e9, 2), "kforge_rss_peak_gb": round(self.rss_peak / 1e9, 2),
                "gpu_memory_peak_gb": round(self.gpu_mem_peak / 1e9, 2) if n else None,
                "gpu_idle_fraction": None if idle is None else round(idle, 3), "gpu_busy_fraction": busy,
                "cpu_mhz": _spread([mhz for mhz, _ in self.cpu_samples]),
                "cpu_busy_fraction": _spread([share for _, share in self.cpu_samples], 3)}


def _spread(values: list[float], digits: int = 0) -> dict | None:
    """Median and the 10th/90th percentiles of a pass's samples."""
    if len(values) < 2:
        return None
    deciles = statistics.quantiles(values, n=10)
    return {"median": round(statistics.median(values), digits), "p10": round(deciles[0], digits),
            "p90": round(deciles[-1], digits)}


def _own_cpu_s() -> float:
    """CPU seconds of kforge's own process (every thread: the relays, pacers and judges of all its GPUs)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _pace(arrived: list[float], gpus: int) -> dict:
    """When the first verdict came (the batch's start: imports, the first compiles and references), and the
    seconds per candidate per GPU from it to the last: the rate once every GPU is busy, apart from the start."""
    if len(arrived) < 2:
        return {"first_verdict_s": round(arrived[0], 1) if arrived else None, "steady_s_per_candidate_per_gpu": None}
    steady = (arrived[-1] - arrived[0]) / (len(arrived) - 1) * gpus
    return {"first_verdict_s": round(arrived[0], 1), "steady_s_per_candidate_per_gpu": round(steady, 3)}


def run_mode(mode: str, jobs: list[CandidateJob], settings: EvalSettings, trace: Path | None = None) -> dict:
    """One pass; `mode` is cold or warm, with `:N` to use the first N visible GPUs (default all). A cold pass empties
    the build cache first, so one after another pass is still cold. `trace`: where the pass's device holds and child
    messages go (benchmarks/hold_trace.py, FILE_<mode>[_<N>gpu].json); their summary joins the report."""
    mode, _, count = mode.partition(":")
    if mode == "cold" and settings.build_root.exists():
        shutil.rmtree(settings.build_root)
    gpus = visible_gpus() if settings.device == "cuda" else []
    settings = settings.model_copy(update={"gpus": gpus[:int(count)] if count else None})
    used = settings.gpus or gpus
    start, verdicts, arrived, cpu = time.perf_counter(), [], [], _own_cpu_s()
    with Sampler(settings.device, used) as sampler, hold_trace.Trace() if trace else contextlib.nullcontext() as traced:
        for v in evaluate(jobs, settings):
            verdicts.append(v)
            arrived.append(time.perf_counter() - start)
            print(json.dumps({"mode": mode, "n": len(verdicts), "at_s": round(arrived[-1], 1),
                              "problem": v.problem, "gpu": v.evidence.gpu, "status": v.status.value, "cause": v.evidence.cause[:160],
                              "stage_s": v.evidence.stage_s, "build_s": v.evidence.build_steps_s,
                              "headers": v.evidence.build_headers}), file=sys.stderr, flush=True)
    wall, cpu = time.perf_counter() - start, _own_cpu_s() - cpu
    if trace:
        traced.write(trace.with_name(f"{trace.stem}_{mode}{f'_{count}gpu' if count else ''}{trace.suffix}"))
    stages: dict[str, list[float]] = {}
    for v in verdicts:
        for stage, seconds in v.evidence.stage_s.items():
            stages.setdefault(stage, []).append(seconds)
        for step, seconds in v.evidence.build_steps_s.items():  # main.o, cuda.cuda.o, the link
            stages.setdefault("build " + (step if step.endswith(".o") else "link"), []).append(seconds)
    return {"mode": mode, "gpus": len(used) or None, "candidates": len(verdicts), "wall_s": round(wall, 1),
            "candidates_per_hour_per_gpu": round(len(verdicts) / wall * 3600 / max(len(used), 1), 1),
            **_pace(arrived, max(len(used), 1)), "parent_cpu_fraction": round(cpu / wall, 3),
            "statuses": dict(Counter(v.status.value for v in verdicts)),
            "headers": dict(Counter("; ".join(v.evidence.build_headers) for v in verdicts if v.evidence.build_headers)),
            "candidates_per_gpu": dict(Counter(str(v.evidence.gpu) for v in verdicts)),
            "median_stage_s": {k: round(statistics.median(x), 3) for k, x in stages.items()},
            **sampler.report(), "held": traced.report() if trace else None,
            "failed": {v.problem: v.evidence.cause[:200] for v in verdicts if v.status.value in ("reference_error", "runtime_error", "timeout", "compile_error")}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernelbench", type=Path)
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--ids", type=problem_ids, default=None, help="only these problems of the level, e.g. 1-6,19,34-39")
    ap.add_argument("--modes", default="cold,warm")
    ap.add_argument("--jobs", type=int, default=None, help="compiles at once (default: kforge's, sized to the machine)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--build-root", type=Path, default=None, help="a build cache to reuse by a later call's warm pass "
                    "(a cold pass empties it; default: a new, empty one)")
    ap.add_argument("--trace", type=Path, default=None, help="write each pass's device holds and child messages here "
                    "(FILE_<mode>.json) and report where the held time went")
    args = ap.parse_args()
    start_children()  # as `kforge evaluate` does before its own work (judging/judge.py): beside writing the candidates
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")  # compiles at once, headers
    scratch = Path(tempfile.mkdtemp(prefix="kb-throughput-"))
    scratch.chmod(0o711)  # the build root inside: the jailed compiler of the precompiled header runs as another uid
    (scratch / "run").mkdir()
    jobs = write_candidates(args.kernelbench, args.level, args.ids, scratch / "run", args.device)
    settings = EvalSettings(device=args.device, size="full" if args.device == "cuda" else "small", jobs=args.jobs,
                            build_root=args.build_root or scratch / "builds")
    report = {"level": args.level, "problems": len(jobs), "jobs": args.jobs, "modes": []}
    for mode in args.modes.split(","):
        report["modes"].append(run_mode(mode, jobs, settings, args.trace))
        print(json.dumps(report["modes"][-1]), file=sys.stderr, flush=True)
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
