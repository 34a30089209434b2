"""How fast is batch evaluation? Serial in-process (the naive way) vs kforge cold vs kforge warm, side by side.

Usage: python benchmarks/eval_speed.py DIR [--device cpu|cuda] [--size small|full] [--jobs N] [--modes cold,warm,naive]
DIR is a solutions-style tree (DIR/<problem>/<name>.py). Prints one JSON object: wall time per mode, and per
candidate the compile seconds, cache hits, device time (the median of the candidate's timed calls), seconds per
stage and per build step; the reference runs' times go to the log (stderr). Each
candidate's result also goes to stderr as it finishes, so a run cut short by a time limit still tells its part.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from evaluator import CandidateJob, EvalSettings, evaluate
from evaluator.child.loading import import_file, load_problem
from evaluator.child.timing import bench
from evaluator.child.trials import build_model, make_inputs
from evaluator.sandbox import forkserver
from kforge.settings import Settings
from reference_problems import list_problems


def _jobs(directory: Path) -> list[CandidateJob]:
    known = {p.name: p for p in list_problems()}
    return [CandidateJob(path=p, problem=known[p.parent.name]) for p in sorted(directory.rglob("*.py")) if p.parent.name in known]


def _naive_one(job: CandidateJob, settings: EvalSettings) -> dict:
    t0 = time.perf_counter()
    module = import_file(job.path, f"naive_{job.path.stem}")
    compile_s = time.perf_counter() - t0
    problem = load_problem(job.problem.path, job.problem.meta.small if settings.size == "small" else {})
    inputs = make_inputs(problem, 0, settings.device)
    with torch.no_grad():
        ref, cand = (build_model(cls, problem, 0, settings.device) for cls in (problem.Model, module.ModelNew))
        for model in (ref, cand):
            bench(lambda: model(*inputs), settings.device, settings.warmup_ms, settings.rep_ms, settings.min_reps, settings.max_reps)
    return {"compile_s": compile_s}


def _progress(mode: str, name: str, result: dict, start: float) -> None:
    print(json.dumps({"mode": mode, "candidate": name, "at_s": round(time.perf_counter() - start, 1), **result}),
          file=sys.stderr, flush=True)


def naive(jobs: list[CandidateJob], settings: EvalSettings, label: str = "naive") -> dict:
    """One process, one candidate after another: compile, run both models, time both. What kforge replaces."""
    start, per = time.perf_counter(), {}
    for job in jobs:
        os.environ["TORCH_EXTENSIONS_DIR"] = tempfile.mkdtemp(prefix="naive-")
        try:
            per[job.path.name] = _naive_one(job, settings)
        except Exception as exc:  # noqa: BLE001 - the naive way has no sandbox: a failure just ends this candidate
            first = (str(exc).strip().splitlines() or [""])[0][:160]
            per[job.path.name] = {"error": f"{type(exc).__name__}: {first}"}
        _progress(label, job.path.name, per[job.path.name], start)
    return {"wall_s": time.perf_counter() - start, "candidates": per}


def with_kforge(jobs: list[CandidateJob], settings: EvalSettings, label: str) -> dict:
    start, per = time.perf_counter(), {}
    for v in evaluate(jobs, settings):
        name = Path(v.solution_path).name
        per[name] = {"status": v.status.value, "compile_s": v.evidence.compile_s, "cache_hit": v.evidence.cache_hit,
                     "wall_s": v.wall_s, "device_ms": v.candidate.median_ms if v.candidate else None,
                     "stage_s": v.evidence.stage_s, "build_steps_s": v.evidence.build_steps_s}
        _progress(label, name, per[name], start)
    return {"wall_s": time.perf_counter() - start, "candidates": per}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("directory", type=Path)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--size", default="small")
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    parser.add_argument("--modes", default="cold,warm,naive", help="which of cold, warm, naive to run, in that order (a repeated one runs again)")
    parser.add_argument("--build-root", type=Path, help="the build cache (default: a fresh one, so cold is cold)")
    args = parser.parse_args()
    forkserver.use(Settings().fork_server)  # KFORGE_FORK_SERVER=0: each child its own interpreter, as kforge's CLI reads it
    report_to = os.fdopen(os.dup(1), "w")  # the report alone; builds run in-process (naive) print to fd 1
    os.dup2(2, 1)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")  # the evaluator's reference run times
    modes = args.modes.split(",")
    jobs = _jobs(args.directory)
    cache = args.build_root or Path(tempfile.mkdtemp(prefix="kforge-bench-builds-"))
    settings = EvalSettings(device=args.device, size=args.size, jobs=args.jobs, build_root=cache, warmup_ms=50, rep_ms=300)
    report = {"candidates": len(jobs), "device": args.device, "size": args.size, "jobs": args.jobs}
    runs = {"cold": ("kforge_cold", with_kforge), "warm": ("kforge_warm", with_kforge), "naive": ("naive_serial", naive)}
    for i, mode in enumerate(modes):  # a mode named again runs again, reported as key_2, key_3...
        key, run = runs[mode]
        report[key if mode not in modes[:i] else f"{key}_{modes[:i].count(mode) + 1}"] = run(jobs, settings, mode)
    for ratio, (slow, fast) in {"naive_over_cold": ("naive_serial", "kforge_cold"),
                                "cold_over_warm": ("kforge_cold", "kforge_warm")}.items():
        if slow in report and fast in report:
            report[ratio] = report[slow]["wall_s"] / report[fast]["wall_s"]
    print(json.dumps(report, indent=1), file=report_to)


if __name__ == "__main__":
    main()
