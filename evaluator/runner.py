"""Orchestrates a batch: static checks, parallel compiles, one trusted reference run per problem, then each
candidate alone on the device, judged in this (parent) process. Yields verdicts; stores nothing."""

from __future__ import annotations

import hashlib
import platform
import secrets
import shutil
import signal
import tempfile
from concurrent.futures import ThreadPoolExecutor, as_completed, wait
from pathlib import Path
from typing import Iterator

import torch
from pydantic import BaseModel

from evaluator import diagnose
from evaluator.contracts import EvalSettings, Evidence, Status, TimingStats, Verdict
from evaluator.correctness import judge_trial
from evaluator.hardware import device_name
from evaluator.sandbox import ChildResult, run_child
from evaluator.static import check_source
from evaluator.timing import method_name, summarize
from reference_problems import Problem

DEFAULT_BUILD_ROOT = Path.home() / ".cache" / "kforge" / "builds"
_LEAK_MIN_BYTES = {"host_rss": 16 * 2**20, "cuda_allocated": 2**20, "cuda_reserved": 2**20, "cuda_driver_used": 8 * 2**20}


class EvaluatorError(RuntimeError):
    """kforge itself could not evaluate (e.g. the reference problem fails): not a verdict on a candidate."""


class CandidateJob(BaseModel):
    """One candidate file to judge against one problem."""

    path: Path
    problem: Problem


class _Prepared(BaseModel):
    job: CandidateJob
    sha256: str
    build_dir: Path
    workdir: Path


class _Reference(BaseModel):
    out_dir: Path
    trials: list[dict]
    timing: TimingStats | None = None
    compiled: TimingStats | None = None

    @property
    def max_input_numel(self) -> int:
        return max(t["max_input_numel"] for t in self.trials)


class _Batch:
    """Secrets and scratch space shared by one evaluate() call."""

    def __init__(self, settings: EvalSettings):
        self.settings = settings
        self.root = Path(tempfile.mkdtemp(prefix="kforge-eval-"))  # honours TMPDIR (e.g. /dev/shm for big outputs)
        self.init_seed = secrets.randbits(31)
        self.trial_seeds = [secrets.randbits(31) for _ in range(settings.trials)]
        self.timing_seed = secrets.randbits(31)
        self.build_root = settings.build_root or DEFAULT_BUILD_ROOT
        self.references: dict[str, _Reference] = {}

    def request(self, role: str, problem: Problem, out_dir: Path, candidate: Path | None = None) -> dict:
        s = self.settings
        out_dir.mkdir(parents=True, exist_ok=True)
        return {
            "role": role, "problem_path": str(problem.path), "candidate_path": str(candidate) if candidate else None,
            "device": s.device, "overrides": problem.meta.small if s.size == "small" else {},
            "init_seed": self.init_seed, "trial_seeds": self.trial_seeds, "timing_seed": self.timing_seed,
            "out_dir": str(out_dir), "leak_calls": s.leak_calls, "compile_baseline": s.compile_baseline,
            "cpu_threads": s.cpu_threads,
            "timing": {"enabled": s.timing, "warmup_ms": s.warmup_ms, "rep_ms": s.rep_ms, "min_reps": s.min_reps,
                       "max_reps": s.max_reps},
        }

    def run(self, role: str, problem: Problem, workdir: Path, build_dir: Path, candidate: Path | None = None) -> ChildResult:
        request = self.request(role, problem, workdir / "out", candidate)
        return run_child(request, workdir, build_dir, self.settings.limits, cap_address_space=self.settings.device == "cpu")


def build_key(source: str, device: str) -> str:
    """Builds are reusable exactly when source, toolchain and target are the same."""
    arch = torch.cuda.get_arch_list() if device == "cuda" else [platform.machine()]
    material = "\0".join([source, torch.__version__, str(torch.version.cuda), device, ",".join(arch), platform.python_version()])
    return hashlib.sha256(material.encode()).hexdigest()[:24]


def _verdict(job: CandidateJob, sha: str, settings: EvalSettings, status: Status, **kw) -> Verdict:
    kw.setdefault("device_name", device_name(settings.device))
    return Verdict(status=status, problem=job.problem.name, solution_sha256=sha, solution_path=str(job.path),
                   device=settings.device, size=settings.size, torch_version=torch.__version__,
                   cuda_version=torch.version.cuda, **kw)


def _failure(result: ChildResult, limits_timeout: float, max_input_numel: int) -> tuple[Status, Evidence] | None:
    """How a child ended if it did not finish normally: timeout, memory, exception, or a silent death."""
    stage, log = result.stage, result.log_tail(chars=2_000_000)  # whole build log: errors may precede many notes
    if result.timed_out:
        return Status.TIMEOUT, Evidence(stage=stage, cause=f"no result after {limits_timeout:.0f} s (stage: {stage})", log_tail=log[-2000:])
    if result.memory_exceeded:
        return Status.RUNTIME_ERROR, Evidence(stage=stage, cause=f"exceeded the host memory limit during {stage}", log_tail=log[-2000:])
    error = result.last("error")
    if error:
        status = Status.COMPILE_ERROR if stage == "compile" else Status.RUNTIME_ERROR
        text = f"{error['message']}\n{log}"
        compiler = diagnose.error_lines(text) if status is Status.COMPILE_ERROR else ""
        lines = (compiler or error["message"]).strip().splitlines()
        first = lines[0][:300] if lines else ""
        return status, Evidence(
            stage=stage, cause=f"{error['exc_type']}: {first}", hint=diagnose.hint_for(text, max_input_numel),
            log_tail=compiler or error["traceback"][-3000:],
        )
    if not result.last("done"):
        code = result.returncode or 0
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        return Status.RUNTIME_ERROR, Evidence(stage=stage, cause=f"child {how} without reporting a result (stage: {stage})",
                                              hint=diagnose.hint_for(log, max_input_numel), log_tail=log[-2000:])
    return None


def _timings(result: ChildResult, device: str) -> dict[str, TimingStats]:
    return {m["which"]: summarize(m["samples"], method_name(device)) for m in result.messages if m.get("event") == "timing"}


def _reference(batch: _Batch, problem: Problem) -> _Reference:
    """Run the problem's Model once per batch in its own child: reference outputs and baseline timings."""
    key = problem.sha256
    if key not in batch.references:
        workdir = batch.root / "ref" / key[:16]
        result = batch.run("reference", problem, workdir, workdir / "build")
        if _failure(result, batch.settings.limits.timeout_s, 0) or not result.last("trials"):
            raise EvaluatorError(f"reference problem '{problem.name}' failed to run: {result.log_tail(800).strip()}")
        times = _timings(result, batch.settings.device)
        batch.references[key] = _Reference(out_dir=workdir / "out", trials=result.last("trials")["trials"],
                                           timing=times.get("model"), compiled=times.get("compiled"))
    return batch.references[key]


def _leak_evidence(growth: dict[str, list[int]]) -> dict[str, int]:
    """Memory that grew in both windows of calls, beyond noise: that is a leak, not a one-time cache."""
    return {k: w[1] for k, w in growth.items() if min(w) > _LEAK_MIN_BYTES[k]}


def _judge(prep: _Prepared, result: ChildResult, ref: _Reference, settings: EvalSettings) -> Verdict:
    job = prep.job
    failed = _failure(result, settings.limits.timeout_s, ref.max_input_numel)
    if failed:
        status, evidence = failed
        return _verdict(job, prep.sha256, settings, status, evidence=evidence)
    evidence = Evidence()
    worst = 0.0
    for i, trial in enumerate(result.last("trials")["trials"]):
        if trial["inputs_changed"]:
            evidence.stage, evidence.cause = "correctness", f"trial {i}: forward() modified its inputs"
            return _verdict(job, prep.sha256, settings, Status.INCORRECT, evidence=evidence)
        mismatch, err = judge_trial(i, ref.out_dir / f"trial_{i}.pt", prep.workdir / "out" / f"trial_{i}.pt",
                                    trial["outputs"], job.problem.meta.atol, job.problem.meta.rtol, settings.device)
        if mismatch:
            evidence.stage, evidence.mismatch = "correctness", mismatch
            where = f"; max abs err {mismatch.max_abs_err:.3g} at {mismatch.worst_index}" if mismatch.worst_index else ""
            evidence.cause = f"trial {i}: {mismatch.reason}{where}"
            return _verdict(job, prep.sha256, settings, Status.INCORRECT, evidence=evidence)
        worst = max(worst, err)
    evidence.max_abs_err = worst
    leaked = _leak_evidence(result.last("leaks")["growth"])
    if memory := result.last("memory"):
        evidence.peak_memory = {k: v for k, v in memory.items() if k != "event"}
    if leaked:
        evidence.stage, evidence.leaked_bytes = "leak", leaked
        evidence.cause = "memory grows with every call: " + ", ".join(f"{k} +{v / 2**20:.1f} MiB per {settings.leak_calls} calls" for k, v in leaked.items())
        return _verdict(job, prep.sha256, settings, Status.LEAK, evidence=evidence)
    cand = _timings(result, settings.device)
    timing = cand.get("model")
    speedup = ref.timing.median_ms / timing.median_ms if timing and ref.timing else None
    vs_compile = ref.compiled.median_ms / timing.median_ms if timing and ref.compiled else None
    evidence.cause = f"correct in {settings.trials} trials (max abs err {worst:.3g})" + (f"; {speedup:.3g}x vs eager" if speedup else "")
    return _verdict(job, prep.sha256, settings, Status.CORRECT, evidence=evidence, candidate=timing,
                    reference=ref.timing, compiled_reference=ref.compiled, speedup=speedup,
                    speedup_vs_compile=vs_compile)


def _prepare(batch: _Batch, job: CandidateJob, index: int) -> _Prepared | Verdict:
    """Static checks first: a truncated, non-Python or GPU-only candidate costs no compile."""
    settings = batch.settings
    source = job.path.read_text(errors="replace")
    sha = hashlib.sha256(job.path.read_bytes()).hexdigest()
    check = check_source(source)
    if check.status:
        return _verdict(job, sha, settings, check.status, evidence=Evidence(stage="parse", cause=check.cause))
    if check.needs_cuda and settings.device != "cuda":
        return _verdict(job, sha, settings, Status.SKIPPED,
                        evidence=Evidence(stage="parse", cause="skipped: no CUDA device (the candidate builds or uses CUDA code)"))
    if check.cpu_only and settings.device == "cuda":
        return _verdict(job, sha, settings, Status.SKIPPED,
                        evidence=Evidence(stage="parse", cause="skipped: CPU-only extension (load_inline without cuda_sources); use --device cpu"))
    return _Prepared(job=job, sha256=sha, build_dir=batch.build_root / build_key(source, settings.device),
                     workdir=batch.root / f"cand{index:05d}")


def _compile(batch: _Batch, prep: _Prepared) -> ChildResult:
    return batch.run("compile", prep.job.problem, prep.workdir / "compile", prep.build_dir, prep.job.path)


def _evaluate_compiled(batch: _Batch, prep: _Prepared, compiled: ChildResult) -> Verdict:
    settings = batch.settings
    failed = _failure(compiled, settings.limits.timeout_s, 0)
    if failed:
        status, evidence = failed
        return _verdict(prep.job, prep.sha256, settings, status, evidence=evidence)
    ref = _reference(batch, prep.job.problem)
    result = batch.run("candidate", prep.job.problem, prep.workdir, prep.build_dir, prep.job.path)
    verdict = _judge(prep, result, ref, settings)
    build = compiled.last("compiled") or {}
    verdict.evidence.compile_s, verdict.evidence.cache_hit = build.get("seconds"), build.get("cache_hit")
    verdict.wall_s = compiled.wall_s + result.wall_s
    shutil.rmtree(prep.workdir / "out", ignore_errors=True)
    return verdict


def evaluate(jobs: list[CandidateJob], settings: EvalSettings) -> Iterator[Verdict]:
    """Judge every job; verdicts are yielded as they are ready (static ones first)."""
    batch = _Batch(settings)
    try:
        prepared = []
        for i, job in enumerate(jobs):
            item = _prepare(batch, job, i)
            if isinstance(item, Verdict):
                yield item
            else:
                prepared.append(item)
        with ThreadPoolExecutor(max_workers=settings.jobs) as pool:
            futures = {pool.submit(_compile, batch, prep): prep for prep in prepared}
            if settings.device == "cpu":
                wait(futures)  # CPU timings must not share the cores with compilers
            for future in as_completed(futures):
                yield _evaluate_compiled(batch, futures[future], future.result())
    finally:
        shutil.rmtree(batch.root, ignore_errors=True)
