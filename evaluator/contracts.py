"""Pydantic contracts of the evaluator: what a caller asks for and the verdict it gets back."""

from __future__ import annotations

import enum
import functools
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, computed_field, model_validator

from evaluator.hardware import device_name
from evaluator.languages import Language, language_of
from evaluator.protocol import Precision
from reference_problems import Problem

if TYPE_CHECKING:
    from db import EvaluationRow


class EvaluatorError(RuntimeError):
    """kforge itself could not evaluate (no device, a sandbox layer missing): not a verdict on a candidate."""


class Status(str, enum.Enum):
    """Outcome of one evaluation, ordered roughly by how far the candidate got."""

    TRUNCATED = "truncated"  # the response was cut off mid-file: nothing to compile
    SYNTAX_ERROR = "syntax_error"
    INVALID = "invalid"  # parses, but is not a candidate (no ModelNew)
    SKIPPED = "skipped"  # cannot run here (e.g. CUDA code on a machine without a GPU)
    COMPILE_ERROR = "compile_error"  # building or loading the module failed
    RUNTIME_ERROR = "runtime_error"  # constructing or calling ModelNew failed, or the child died
    TIMEOUT = "timeout"
    INCORRECT = "incorrect"
    LEAK = "leak"
    CHEAT = "cheat"  # caught gaming the judge
    REFERENCE_ERROR = "reference_error"  # kforge's side failed (the problem's reference): no verdict on the candidate
    KFORGE_ERROR = "kforge_error"  # kforge's own step in the candidate's child failed (out of memory copying its outputs)
    CORRECT = "correct"

    @property
    def kforge_failed(self) -> bool:
        """kforge's own side failed, not the candidate: the command says so and exits 1."""
        return self in (Status.REFERENCE_ERROR, Status.KFORGE_ERROR)

    @property
    def reusable(self) -> bool:
        """A stored verdict that stands for the same code judged again on the same device and size: every one
        but kforge's own failures, which said nothing about the code."""
        return not self.kforge_failed

    @property
    def judged(self) -> bool:
        """Whether the code was judged at all: `skipped` never ran it (CUDA code without a GPU) and kforge's own
        failures said nothing about it, so neither counts as an evaluated sample."""
        return self is not Status.SKIPPED and not self.kforge_failed


class Limits(BaseModel):
    """Resource limits for one candidate child process."""

    timeout_s: float = 900.0
    memory_mb: int = 16_384  # the child's cgroup memory limit, host RSS watch (and address space on CPU runs)
    file_size_mb: int = 16_384  # largest file a child may write (RLIMIT_FSIZE): a disk-filling candidate fails early
    processes: int = 4096  # tasks (threads count) in one child's cgroup: a fork bomb is refused (evaluator/sandbox/cgroups.py)


HALF_TOLERANCE = 1e-2  # KernelBench's atol and rtol at fp16 and bf16 (torchbench's looser half-precision value)
DTYPE_NAMES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}  # as torch names them


def tolerance(problem: Problem, precision: Precision) -> tuple[float, float]:
    """(atol, rtol) outputs are held to: the problem's own at fp32; at half precision KernelBench's 1e-2, or the
    problem's where it declares more (a half-precision result cannot meet an fp32 tolerance)."""
    atol, rtol = problem.meta.atol, problem.meta.rtol
    if precision == "fp32":
        return atol, rtol
    return max(atol, HALF_TOLERANCE), max(rtol, HALF_TOLERANCE)


class EvalSettings(BaseModel):
    """How to evaluate: shared by every candidate of a batch."""

    device: str = "cpu"  # "cpu" or "cuda"
    size: str = "full"  # "full" or "small" (the problem's small variant)
    trials: int = Field(3, ge=1)
    leak_calls: int = Field(10, ge=2)  # calls per leak window at most: fewer for a slow call (leaks.window_calls)
    timing: bool = True
    warmup_ms: float = 25.0  # untimed calls before the timed ones, the estimate's included (Triton's do_bench: 25 ms)
    rep_ms: float = 1000.0
    min_reps: int = 10
    max_reps: int = 1000
    rel_ci: float | None = 0.005  # stop timing once the median's 95 % interval is within +-0.5 % (None: run rep_ms)
    paired: bool = True  # time the reference beside each round of the candidate (False: apart, one after the other)
    # CPU, paired: the candidate is a forward server, timed and read by kforge's own process (parent/trusted_timing.py);
    # False: timed by the harness in its own process (the in-process design, which a candidate can reach)
    forward_server: bool = True
    # CUDA, the same: the clock on the comparer's own stream, the outputs read by IPC (evaluator/child/cuda_fills.py);
    # off until its precision is measured on the device against the in-process design's
    cuda_forward_server: bool = False
    # candidates whose untimed stages may run at once on one device, beside its holder, where candidates are forward
    # servers (evaluator/parent/sharing.py); None: 2 on CUDA, 1 on CPU, whose untimed stages run on the timing cores
    untimed_share: int | None = Field(None, ge=1)
    compile_baseline: bool = False  # also time torch.compile(reference)
    cpu_threads: int = Field(1, ge=1)  # CPU runs: same thread count for both sides; 1 keeps timings stable
    cpu_pairs: int = Field(3, ge=1)  # CPU runs: fresh process pairs a correct candidate is timed in (runner.py)
    limits: Limits = Field(default_factory=Limits)
    build_root: Path | None = None  # content-addressed build cache; default ~/.cache/kforge/builds
    jobs: int | None = Field(None, ge=1)  # compiles at once; None: sized to the machine (batch.compile_plan)
    sandbox: str = "strict"  # strict: refuse to run when a sandbox layer is missing; warn: run and say so
    gpus: list[str] | None = None  # CUDA devices (ids as CUDA_VISIBLE_DEVICES names them) to spread runs over; None: all visible
    language: Language | None = None  # the kernel language every candidate is judged as (--backend); None: read from each one's code
    precision: Precision = "fp32"  # KernelBench's: the dtype floating-point inputs and both models are cast to

    def tolerance(self, problem: Problem) -> tuple[float, float]:
        return tolerance(problem, self.precision)

    def language_of(self, source: str) -> Language | None:
        """The language a candidate is judged as in this batch."""
        return self.language or language_of(source)

    def interprets(self, source: str) -> bool:
        """A Triton candidate on CPU runs under Triton's interpreter: its kernels' bodies run as Python, so their
        times say nothing of the kernel's speed."""
        return self.device == "cpu" and self.language_of(source) is Language.TRITON


class CandidateJob(BaseModel):
    """One candidate file to judge against one problem. Its bytes are read once (here, unless the caller already
    has them, e.g. the LLM answer it just wrote) and travel with the job: they are what is stored, hashed and judged,
    so a file edited meanwhile cannot be stored as one thing and evaluated as another."""

    path: Path
    problem: Problem
    source: bytes = Field(repr=False)

    @model_validator(mode="before")
    @classmethod
    def _read_once(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("source") is None:
            data = {**data, "source": Path(data["path"]).read_bytes()}
        return data

    @computed_field
    @functools.cached_property
    def sha256(self) -> str:
        """What the solution is stored and found under."""
        return hashlib.sha256(self.source).hexdigest()

    @property
    def text(self) -> str:
        return self.source.decode(errors="replace")


class TimingStats(BaseModel):
    """Summary of repeated timings, in milliseconds."""

    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    p20_ms: float
    p80_ms: float
    std_ms: float
    cv: float  # std / mean
    reps: int
    method: str  # "cuda_events+l2_flush" or "perf_counter"
    median_ci_low_ms: float | None = None  # the median's 95 % interval (order statistics)
    median_ci_high_ms: float | None = None


class SpeedOfLight(BaseModel):
    """The least time the device's peaks allow one call of the problem (evaluator/verdict/speed_of_light.py): its bytes in and out
    at peak bandwidth, or its counted FLOPs at the fastest rate a kernel checked against fp32 may use, whichever is
    longer. A median's fraction of it (ms / median) is how close a kernel is to the hardware, not to PyTorch."""

    ms: float
    bound: str  # which peak sets it: "bandwidth" or "flop"
    arithmetic: str  # both bounds worked out
    hardware: str  # the device's peaks, as the prompts show them
    flops: int | None = None  # of one call at the run's size, as counted: what the report's FLOP/s divide
    bytes_moved: int | None = None  # of one call at the run's size: what the report's bandwidth divides

    def fraction(self, median_ms: float) -> float:
        return self.ms / median_ms


class TimingReport(BaseModel):
    """How the times behind a verdict were taken: enough to redo them, or to doubt them."""

    method: str  # "cuda_events+l2_flush" or "perf_counter"
    calls: int  # the candidate's timed calls
    reference_calls: int | None = None
    untimed_calls: int = 0  # the candidate's calls before them: the estimate's and the warmup's
    warmup_ms: float = 0.0
    l2_flush: str = ""
    fresh_inputs: str = ""  # the policy the candidate's inputs were timed under
    checked_calls: list[int] = Field(default_factory=list)  # timed calls whose outputs the comparer checked
    speedup_interval: list[float] | None = None  # [low, high], 95 %
    interval: str = ""  # how that interval was found
    pair_speedups: list[float] | None = None  # CPU: each fresh process pair's own median ratio (Batch.pairs)
    floor: str = ""  # the physical floor the median was held to, worked out, or why there was none
    speed_of_light: SpeedOfLight | None = None  # that floor as numbers (None where there is none)
    cpu_threads: int | None = None


class Mismatch(BaseModel):
    """Where a candidate's output differs most from the reference's."""

    trial: int
    max_abs_err: float
    max_rel_err: float
    worst_index: list[int]
    expected: float | None = None
    got: float | None = None
    bad_fraction: float = 0.0
    reason: str = ""  # shape/dtype/nan mismatch and the like


class Evidence(BaseModel):
    """What backs a status: whichever of these the stages produced."""

    cause: str = ""  # one line a human reads first
    hint: str = ""  # the likely root cause, when kforge recognises it
    log_tail: str = ""  # compiler output or traceback (trimmed)
    stage: str = ""  # stage that failed: parse, compile, correctness, leak, timing
    mismatch: Mismatch | None = None
    max_abs_err: float | None = None
    tolerance_used: float | None = None  # max |got - exp| / (atol + rtol * |exp|) over all checks: 1.0 is the limit
    size: str = ""  # the size that ran (Problem.size_label): full, small, or small (derived) with the constants it set
    problem_sha256: str = ""  # the content of the problem file it was judged against: a verdict stands only for it
    precision: Precision | None = None  # the dtype the inputs and models were cast to (EvalSettings.precision)
    atol: float | None = None  # the tolerance outputs were held to at that precision (EvalSettings.tolerance)
    rtol: float | None = None
    exploit: str = ""  # for `cheat`: which reward hack was caught (e.g. no_custom_kernel, stale_output)
    language: Language | None = None  # the kernel language judged (evaluator/languages.py); None: none found
    leaked_bytes: dict[str, int] = Field(default_factory=dict)
    peak_memory: dict[str, int] = Field(default_factory=dict)
    compile_s: float | None = None
    cache_hit: bool | None = None
    build_steps_s: dict[str, float] = Field(default_factory=dict)  # ninja step (object file, link) -> seconds
    build_headers: list[str] = Field(default_factory=list)  # each CUDA source: built with lean or full torch headers
    # wall seconds: the compile child; this candidate's wait for its problem's reference (the device included) and
    # that reference's run from request to ready (once per problem, shared); then each stage of its own run
    stage_s: dict[str, float] = Field(default_factory=dict)
    gpu: str | None = None  # the CUDA device id (as in CUDA_VISIBLE_DEVICES) the candidate ran on
    sandbox: dict[str, str] = Field(default_factory=dict)  # layer -> "on ..." or "off: why", as the child ran
    timing: TimingReport | None = None
    notes: list[str] = Field(default_factory=list)
    beside_s: float | None = None  # seconds its untimed stages ran beside another candidate's hold (sharing)
    rejudged_alone: bool = False  # it failed while sharing its device, and this verdict is its run alone


class Verdict(BaseModel):
    """The evaluator's answer for one candidate; callers store it, the evaluator never does."""

    status: Status
    problem: str
    solution_sha256: str
    solution_path: str | None = None
    device: str
    device_name: str = ""
    size: str = "full"
    precision: Precision = "fp32"
    evidence: Evidence = Field(default_factory=Evidence)
    candidate: TimingStats | None = None
    reference: TimingStats | None = None
    compiled_reference: TimingStats | None = None
    speedup: float | None = None  # reference median / candidate median, only when correct
    speedup_vs_compile: float | None = None
    torch_version: str = ""
    cuda_version: str | None = None
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status is Status.CORRECT

    @classmethod
    def of(cls, job: CandidateJob, settings: EvalSettings, status: Status, **kw: Any) -> Verdict:
        """A fresh verdict on `job`, stamped with what it was judged on (device, size, precision and its tolerance,
        torch and CUDA versions): the evaluator's, and the one a caller reaches without it (an answer with no code
        to run)."""
        import torch  # here: the contracts load without torch

        kw.setdefault("device_name", device_name(settings.device))
        evidence = kw.setdefault("evidence", Evidence())
        evidence.language = evidence.language or settings.language_of(job.text)
        evidence.size = job.problem.size_label(settings.size)
        evidence.problem_sha256 = job.problem.sha256
        evidence.precision = settings.precision
        evidence.atol, evidence.rtol = settings.tolerance(job.problem)
        return cls(status=status, problem=job.problem.name, solution_sha256=job.sha256, solution_path=str(job.path),
                   device=settings.device, size=settings.size, precision=settings.precision,
                   torch_version=torch.__version__, cuda_version=torch.version.cuda, **kw)

    @classmethod
    def from_row(cls, row: EvaluationRow) -> Verdict:
        """A stored evaluation back as a Verdict, so callers handle one kind of result."""
        stats = {k: TimingStats.model_validate(v) for k, v in row.timings.items()}
        return cls(status=Status(row.status), problem=row.problem, solution_sha256=row.solution_sha256,
                   solution_path=row.solution_path, device=row.device, device_name=row.device_name, size=row.size,
                   precision=row.precision, evidence=Evidence.model_validate(row.evidence), speedup=row.speedup,
                   speedup_vs_compile=row.speedup_vs_compile, torch_version=row.torch_version,
                   cuda_version=row.cuda_version, wall_s=row.wall_s, **stats)


class KernelProfile(BaseModel):
    """One kernel of a profiled forward call, as Nsight Compute measured it (every launch of that name in the
    profiled calls, metrics weighted by each launch's time). Percentages are of the device's peak; stalls are the
    share of active warps' cycles stalled on each reason."""

    name: str
    launches: int  # per forward call
    ms: float  # GPU time per forward call
    share: float  # of the forward's GPU time, 0..1
    sm_pct: float | None = None
    dram_pct: float | None = None
    l2_pct: float | None = None
    occupancy_pct: float | None = None  # achieved: active warps of the peak, while the SM is active
    registers: int | None = None  # per thread
    stalls: dict[str, float] = Field(default_factory=dict)  # reason -> percent, largest first


class Profile(BaseModel):
    """Nsight Compute's view of one correct candidate's forward calls (evaluator/parent/profiling.py), for the refine
    prompt. Advice for the LLM only, never part of a verdict: ncu's output lies in a folder the candidate's process
    could write. `said` is why there are no kernels (no CUDA, no ncu, a timeout...)."""

    kernels: list[KernelProfile] = Field(default_factory=list)  # by time, largest first
    calls: int = 0  # forward calls profiled
    gpu_ms: float | None = None  # every kernel of one forward call
    said: str = ""
