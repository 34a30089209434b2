"""Orchestrates a batch: static checks, parallel compiles, one trusted reference run per problem, then each
candidate alone on the device, judged in this (parent) process. Yields verdicts; stores nothing."""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import secrets
import shutil
import tempfile
import threading
import time
import queue
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import torch
from pydantic import BaseModel

from evaluator.contracts import EvalSettings, Evidence, Status, Verdict
from evaluator.correctness import load_outputs
from evaluator.hardware import device_name, visible_gpus
from evaluator.judge import Outcome, Reference, ended_badly, judge, timings
from evaluator.sandbox import ChildResult, run_child
from evaluator.static import check_source
from reference_problems import Problem

_log = logging.getLogger(__name__)

DEFAULT_BUILD_ROOT = Path.home() / ".cache" / "kforge" / "builds"
T = TypeVar("T")


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


class Batch:
    """Secrets and scratch space shared by one evaluate() call."""

    def __init__(self, settings: EvalSettings):
        self.settings = settings
        self.gpus = (settings.gpus or visible_gpus()) if settings.device == "cuda" else [None]
        if not self.gpus:
            raise EvaluatorError("no CUDA device is visible (check CUDA_VISIBLE_DEVICES or --gpus)")
        self.root = Path(tempfile.mkdtemp(prefix="kforge-eval-"))  # honours TMPDIR (e.g. /dev/shm for big outputs)
        self.init_seed = secrets.randbits(31)
        self.trial_seeds = [(f"trial_{i}", secrets.randbits(31)) for i in range(settings.trials)]
        self.timing_seed, self.verify_seed = secrets.randbits(31), secrets.randbits(31)
        self.probe_fraction = 0.2 + 0.6 * secrets.randbelow(1000) / 1000  # which timed rep gets its output checked
        self.build_root = settings.build_root or DEFAULT_BUILD_ROOT
        self.references: dict[str, Reference] = {}
        self.stop = threading.Event()  # set when the batch ends early: running children are stopped
        self.free_gpus: queue.Queue = queue.Queue()
        for gpu in self.gpus:
            self.free_gpus.put(gpu)

    def reference_seeds(self) -> list[tuple[str, int]]:
        """The reference computes every output a candidate is checked against: its trials, timed and verify calls."""
        return self.trial_seeds + [("timing", self.timing_seed), ("verify", self.verify_seed)]

    def _secrets(self, role: str) -> dict:
        """Seeds for the roles that run the model; the compile child, which only imports candidate code (and
        could stash what it sees for the candidate child), gets none. The candidate runs its trials shuffled."""
        if role == "compile":
            return {}
        seeds = self.reference_seeds() if role == "reference" \
            else secrets.SystemRandom().sample(self.trial_seeds, len(self.trial_seeds))
        return {"seeds": seeds, "timing_seed": self.timing_seed, "verify_seed": self.verify_seed,
                "probe_fraction": self.probe_fraction}

    def request(self, role: str, problem: Problem, out_dir: Path, candidate: Path | None = None, **extra) -> dict:
        s = self.settings
        out_dir.mkdir(parents=True, exist_ok=True)
        return {
            "role": role, "problem_path": str(problem.path), "candidate_path": str(candidate.resolve()) if candidate else None,
            "device": s.device, "overrides": problem.meta.small if s.size == "small" else {},
            "init_seed": self.init_seed, **self._secrets(role),
            "out_dir": str(out_dir), "leak_calls": s.leak_calls, "compile_baseline": s.compile_baseline,
            "cpu_threads": s.cpu_threads,
            "timing": {"enabled": s.timing, "warmup_ms": s.warmup_ms, "rep_ms": s.rep_ms, "min_reps": s.min_reps,
                       "max_reps": s.max_reps},
            **extra,
        }

    def run(self, role: str, problem: Problem, workdir: Path, build_dir: Path, candidate: Path | None = None,
            gpu: str | None = None, pass_fds: tuple[int, ...] = (), gate: Callable[[], str | None] | None = None,
            **extra) -> ChildResult:
        request = self.request(role, problem, workdir / "out", candidate, **extra)
        return run_child(request, workdir, build_dir, self.settings.limits, cap_address_space=self.settings.device == "cpu",
                         stop=self.stop, gpu=gpu, pass_fds=pass_fds, gate=gate)

    def take_device(self) -> str | None:
        """A free device of the batch (waits for one); gives up when the batch is stopped."""
        while not self.stop.is_set():
            try:
                return self.free_gpus.get(timeout=0.25)
            except queue.Empty:
                pass
        raise EvaluatorError("the batch was stopped")


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


def _read_back(fds: dict[str, int], report: dict, key: str, suffix: str = "") -> dict[str, list]:
    """Every label's tensors from its memory file, as described in the report (the mapping outlives the fd)."""
    return {label: load_outputs(fds[label + suffix], entry[key]) for label, entry in report.items()}


def run_reference(batch: Batch, problem: Problem, save_inputs: bool = False,
                  gate: Callable[[], str | None] | None = None) -> Reference:
    """Run the problem's Model in its own child, which writes its outputs into memory files that kforge made
    and passed it: expected outputs never get a path on disk, so candidates compiling meanwhile cannot read them.
    `gate` (see run_child) hands it a device once one is free; without one it runs on the batch's first."""
    workdir = batch.root / "ref" / problem.sha256[:16]
    labels = [label for label, _ in batch.reference_seeds()]
    names = labels + [f"{label}.inputs" for label in labels if save_inputs]
    fds = {name: os.memfd_create(f"kforge-{name}", os.MFD_CLOEXEC) for name in names}
    try:
        result = batch.run("reference", problem, workdir, workdir / "build", gpu=batch.gpus[0], pass_fds=tuple(fds.values()),
                           gate=gate, save_inputs=save_inputs, output_fds=fds)
        if ended_badly(result, batch.settings.limits.timeout_s, 0) or not result.last("trials"):
            raise EvaluatorError(f"reference problem '{problem.name}' failed to run: {result.log_tail(800).strip()}")
        _log.info("reference %s ran %.1f s: %s", problem.name, result.wall_s, result.stage_seconds())
        report = result.last("trials")["trials"]
        times = timings(result, batch.settings.device)
        return Reference(
            outputs=_read_back(fds, report, "outputs"),
            meta={label: entry["outputs"] for label, entry in report.items()}, trials=report,
            inputs=_read_back(fds, report, "inputs", ".inputs") if save_inputs else {},
            timing=times.get("model"), compiled=times.get("compiled"))
    finally:
        for fd in fds.values():
            os.close(fd)
        shutil.rmtree(workdir, ignore_errors=True)


def _notes(compiled: ChildResult, result: ChildResult) -> list[str]:
    notes = []
    if (result.last("env") or {}).get("confined") is False:
        notes.append("no seccomp filter in this child (not x86-64, or not permitted): the candidate could have signalled kforge")
    if compiled.stragglers + result.stragglers:
        notes.append(f"killed {compiled.stragglers + result.stragglers} process(es) the candidate left running after its child ended")
    return notes


def _speed(outcome: Outcome, ref: Reference) -> dict:
    """Timings and speedups, reported only for a correct candidate."""
    timing = outcome.timing
    if outcome.status is not Status.CORRECT or timing is None:
        return {}
    speedup = ref.timing.median_ms / timing.median_ms if ref.timing else None
    if speedup:
        outcome.evidence.cause += f"; {speedup:.3g}x vs eager"
    return {"candidate": timing, "reference": ref.timing, "compiled_reference": ref.compiled, "speedup": speedup,
            "speedup_vs_compile": ref.compiled.median_ms / timing.median_ms if ref.compiled else None}


def _prepare(batch: Batch, job: CandidateJob, index: int) -> _Prepared | Verdict:
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


def _compile(batch: Batch, prep: _Prepared) -> ChildResult:
    return batch.run("compile", prep.job.problem, prep.workdir / "compile", prep.build_dir, prep.job.path)


def _on_free_device(batch: Batch, run: Callable[[Callable[[], str | None]], T]) -> tuple[T, str | None]:
    """run(take) with one device of the batch held from the moment its child calls take() (its gate) until it
    ends: one child at a time per device, on whichever of the batch's GPUs (or the CPU) is free. On CUDA the
    child starts (interpreter and torch, seconds) while it waits for a GPU; on CPU only once the CPU is free,
    so that start cannot slow another child's timed run. A child that never calls take() holds no device."""
    held: list[str | None] = []

    def take() -> str | None:
        if not held:
            held.append(batch.take_device())
        return held[0]

    try:
        if batch.settings.device == "cpu":
            take()
        return run(take), (held[0] if held else None)
    finally:
        if held:
            batch.free_gpus.put(held[0])


def _judge_candidate(batch: Batch, prep: _Prepared, compiled: ChildResult) -> Verdict:
    """A failed compile waits for no device."""
    verdict, gpu = _on_free_device(batch, lambda take: _evaluate_compiled(batch, prep, compiled, take))
    verdict.evidence.gpu = gpu
    return verdict


def _run_references(batch: Batch, problems: list[Problem], pool: ThreadPoolExecutor) -> None:
    """Every problem's reference, one per free device like candidates (so the next child starts meanwhile)."""
    futures = {p.sha256: pool.submit(_on_free_device, batch, lambda take, p=p: run_reference(batch, p, gate=take))
               for p in problems}
    for sha, future in futures.items():
        batch.references[sha] = future.result()[0]


def _evaluate_compiled(batch: Batch, prep: _Prepared, compiled: ChildResult, take: Callable[[], str | None]) -> Verdict:
    settings = batch.settings
    failed = ended_badly(compiled, settings.limits.timeout_s, 0)
    if failed:
        return _verdict(prep.job, prep.sha256, settings, failed.status, evidence=failed.evidence)
    ref = batch.references[prep.job.problem.sha256]
    result = batch.run("candidate", prep.job.problem, prep.workdir, prep.build_dir, prep.job.path, gate=take)
    judged_at = time.monotonic()
    outcome = judge(result, ref, prep.job.problem.meta, settings, prep.workdir / "out")
    judge_s = time.monotonic() - judged_at
    verdict = _verdict(prep.job, prep.sha256, settings, outcome.status, evidence=outcome.evidence, **_speed(outcome, ref))
    build, memory = compiled.last("compiled") or {}, result.last("memory") or {}
    verdict.evidence.compile_s, verdict.evidence.cache_hit = build.get("seconds"), build.get("cache_hit")
    verdict.evidence.build_steps_s = build.get("steps") or {}
    verdict.evidence.stage_s = {"compile_child": round(compiled.wall_s, 3), **result.stage_seconds(), "judge": round(judge_s, 3)}
    verdict.evidence.peak_memory = {k: v for k, v in memory.items() if k not in ("event", "_t")}
    verdict.evidence.notes += _notes(compiled, result)
    verdict.wall_s = compiled.wall_s + result.wall_s
    shutil.rmtree(prep.workdir / "out", ignore_errors=True)
    return verdict


def evaluate(jobs: list[CandidateJob], settings: EvalSettings) -> Iterator[Verdict]:
    """Judge every job; verdicts are yielded as they are ready (static ones first). Compiles run in parallel;
    each compiled candidate runs as soon as one of the batch's devices is free. However it ends (Ctrl-C, or
    the caller closing the generator), running children are stopped and the scratch space removed."""
    batch = Batch(settings)
    compilers = ThreadPoolExecutor(max_workers=settings.jobs)
    runners = ThreadPoolExecutor(max_workers=2 * len(batch.gpus))  # per device: one running, one starting
    try:
        prepared = []
        for i, job in enumerate(jobs):
            item = _prepare(batch, job, i)
            if isinstance(item, Verdict):
                yield item
            else:
                prepared.append(item)
        start_compiles = lambda: {compilers.submit(_compile, batch, prep): prep for prep in prepared}  # noqa: E731
        cpu = settings.device == "cpu"  # CPU timings must not share the cores with compilers
        compiling = {} if cpu else start_compiles()
        problems = {prep.job.problem.sha256: prep.job.problem for prep in prepared}
        _run_references(batch, list(problems.values()), runners)  # on CUDA while the compiles run
        if cpu:
            compiling = start_compiles()
            wait(compiling)
        pending = set(compiling)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                if future in compiling:
                    pending.add(runners.submit(_judge_candidate, batch, compiling[future], future.result()))
                else:
                    yield future.result()
    finally:
        batch.stop.set()
        for pool in (compilers, runners):
            pool.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(batch.root, ignore_errors=True)
