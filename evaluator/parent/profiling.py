"""Nsight Compute metrics of a correct candidate's forward calls, for the refine prompt.

The trusted parent starts `ncu ... python -m evaluator.child.main` in the profile jail (evaluator/sandbox/jail.py, spec key
`profile`: its own network namespace with loopback up, a private /dev/shm, TCP allowed by Landlock and seccomp,
because ncu and its injection in the child talk over both; every other layer stays). The child (role `profile`)
loads the candidate's cached build as a candidate child does, makes one warm-up call and then CALLS forward calls
inside the NVTX range `kforge_forward`, the only work ncu profiles. ncu writes its CSV to a file in the child's
scratch, which the parent reads after the child ended.

That file lies where the candidate's process could write, so its numbers are advice for the LLM and nothing else:
they never touch a verdict, and nothing here writes the db. Without CUDA or without `ncu` on PATH nothing runs and
the Profile says why.
"""

from __future__ import annotations

import csv
import io
import os
import secrets
import shutil
import tempfile
import time
from pathlib import Path

from evaluator.parent import buildcache
from evaluator.sandbox import disk
from evaluator.contracts import CandidateJob, EvalSettings, EvaluatorError, KernelProfile, Profile
from evaluator.parent.jail_spec import jail_spec, require_layers
from evaluator.protocol import ProfileRequest
from evaluator.sandbox.results import read_end
from evaluator.sandbox.spawn import Child

CALLS = 3  # forward calls profiled (after one warm-up call)
START_S = 120.0  # ncu's start, the interpreter, torch, CUDA's init and the candidate's load
REPLAYS = 50  # ncu replays each kernel once per pass of the metric set, restoring its memory in between: a bound
LOCK_WAIT_S = 300.0  # for another kforge process's run on the GPU to end: ncu's replays would disturb its timing
_CSV_CHARS = 16 * 2**20  # of ncu's CSV read: its rows for CALLS calls are kilobytes; more was written by the candidate
_STALLS = ("long_scoreboard", "short_scoreboard", "barrier", "mio_throttle", "math_pipe_throttle", "lg_throttle",
           "not_selected")
_STALL = "smsp__warp_issue_stalled_{}_per_warp_active.pct"  # percent of active warps' cycles stalled on a reason
_FIELDS = {  # ncu metric -> KernelProfile field
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_pct",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct",
    "lts__t_sectors.avg.pct_of_peak_sustained_elapsed": "l2_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy_pct",
    "launch__registers_per_thread": "registers",
}
_TIME = "gpu__time_duration.sum"
METRICS = (_TIME, *_FIELDS, *(_STALL.format(s) for s in _STALLS))
_UNIT_MS = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0, "s": 1e3, "second": 1e3}


def profile(job: CandidateJob, settings: EvalSettings, median_ms: float | None = None) -> Profile:
    """ncu's metrics of `job`'s forward calls on a GPU of `settings`, or a Profile whose `said` says why not.
    `median_ms` (the candidate's measured median) sizes the child's time budget."""
    ncu = shutil.which("ncu")
    if settings.device != "cuda":
        return Profile(said=f"no CUDA: Nsight Compute profiles only on a GPU (device {settings.device})")
    if ncu is None:
        return Profile(said="ncu not found on PATH")
    from evaluator.parent.batch import DEFAULT_BUILD_ROOT, build_key  # torch: only where a profile runs
    from evaluator.hardware import visible_gpus

    gpus = settings.gpus or visible_gpus()
    if not gpus:
        return Profile(said="no CUDA device visible")
    build_root = settings.build_root or DEFAULT_BUILD_ROOT
    build_dir = build_root / build_key(job.text, "cuda")
    if not any(build_dir.rglob("*.so")):
        return Profile(said="no build of this candidate in the cache (it is profiled after its evaluation)")
    disk.sweep(Path(scratch_parent()))  # the disks of a kforge killed without cleanup
    scratch = Path(tempfile.mkdtemp(prefix=f"kforge-profile-{os.getpid()}-", dir=scratch_parent()))
    scratch.chmod(0o711)  # as a batch's root: a child running as another uid reaches its own folder in it
    try:
        require_layers(scratch, settings.sandbox)
        return _run(job, settings, Path(ncu), build_root, build_dir, scratch / "profile", gpus[0], median_ms)
    except EvaluatorError as exc:
        return Profile(said=str(exc))
    finally:
        disk.release(scratch)  # with the profile child's disk


def scratch_parent() -> str:
    """Where a profile's scratch goes: the temporary folder, unless it lies in /dev/shm (TMPDIR=/dev/shm keeps a
    batch's big outputs in RAM), which the profile jail replaces with a private tmpfs; then /tmp."""
    parent = os.path.realpath(tempfile.gettempdir())
    return "/tmp" if parent == "/dev/shm" or parent.startswith("/dev/shm/") else parent


def budget_s(median_ms: float | None, limit_s: float) -> float:
    """START_S plus REPLAYS times the profiled calls (warm-up included) at the candidate's median, capped by the
    limit; an unknown median counts as a second per call."""
    per_call_s = (median_ms / 1e3) if median_ms else 1.0
    return min(limit_s, START_S + REPLAYS * (CALLS + 1) * per_call_s)


def _run(job: CandidateJob, settings: EvalSettings, ncu: Path, build_root: Path, build_dir: Path, workdir: Path,
         gpu: str, median_ms: float | None) -> Profile:
    from evaluator.parent.leases import Lease

    own, workdir = workdir, workdir / "run"  # its disk (evaluator/sandbox/disk.py), and its scratch in it
    own.mkdir(mode=0o711)
    in_disk = disk.mount(own)
    src = own / "src" / job.path.name
    src.parent.mkdir()
    src.write_bytes(job.source)  # the job's bytes, as the runner hands them to a candidate child
    problem = job.problem
    view = buildcache.view(build_root, build_dir, workdir)
    ncu_home = ncu.resolve().parent  # ncu's own files (its sections, its injection libraries)
    spec = jail_spec([workdir], [problem.path, src, build_root / "pch", ncu_home], view=view)
    spec |= {"profile": True, "disk": in_disk}
    limits = settings.limits.model_copy(update={"timeout_s": budget_s(median_ms, settings.limits.timeout_s)})
    log = workdir / "ncu.csv"
    runner = [str(ncu), "--metrics", ",".join(METRICS), "--csv", "--log-file", str(log), "--target-processes", "all",
              "--clock-control", "none", "--nvtx", "--nvtx-include", "kforge_forward/"]
    lease = Lease(gpu)
    lock = _wait_for(lease.take)
    if lock is None:
        lease.leave()
        return Profile(said=f"GPU {gpu} stayed busy with another kforge run for {LOCK_WAIT_S:.0f} s")
    try:
        child = Child(workdir, build_dir, limits, cap_address_space=False, jail=spec, runner=runner)
        child.begin(ProfileRequest(problem_path=str(problem.path), candidate_path=str(src),
                                   overrides=problem.overrides(settings.size),
                                   init_seed=secrets.randbits(31), input_seed=secrets.randbits(31), calls=CALLS,
                                   precision=settings.precision, gpu=gpu))
        result = child.finish()
    finally:
        Lease.give_back(lock)
    text = read_end(log, _CSV_CHARS)
    kernels = parse_csv(text, CALLS)
    if kernels:
        return Profile(kernels=kernels, calls=CALLS, gpu_ms=sum(k.ms for k in kernels))
    if result.timed_out:
        return Profile(said=f"ncu ran past its budget of {limits.timeout_s:.0f} s")
    said = [line for line in (text + "\n" + result.log_tail(4000)).splitlines()
            if line.startswith(("==ERROR==", "==WARNING==", "kforge jail:")) or "Error" in line]
    return Profile(said="ncu: " + (said[-1].removeprefix("==WARNING== ").removeprefix("==ERROR== ").strip()[:300]
                                   if said else f"no kernels measured (exit status {result.returncode})"))


def _wait_for(take, wait_s: float = LOCK_WAIT_S):
    deadline = time.monotonic() + wait_s
    while (got := take()) is None and time.monotonic() < deadline:
        time.sleep(0.5)
    return got


def parse_csv(text: str, calls: int) -> list[KernelProfile]:
    """ncu's `--csv` rows (one per launch and metric; numbers may carry thousands separators; ncu's own `==PROF==`
    lines may surround them) as kernels, largest share of GPU time first. A launch's metrics are weighted by its
    time; a value ncu could not give ("n/a") is left out."""
    lines = [line for line in text.splitlines() if not line.startswith("==")]
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    launches: dict[str, dict] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        value = _number(row.get("Metric Value", ""))
        if value is None or not row.get("ID"):
            continue
        launch = launches.setdefault(row["ID"], {"name": row.get("Kernel Name", "?"), "metrics": {}})
        metric = row.get("Metric Name", "")
        if metric == _TIME:
            value *= _UNIT_MS.get(row.get("Metric Unit", "").strip(), 1e-6)
        launch["metrics"][metric] = value
    by_name: dict[str, list[dict]] = {}
    for launch in launches.values():
        if _TIME in launch["metrics"]:
            by_name.setdefault(launch["name"], []).append(launch["metrics"])
    total = sum(m[_TIME] for ms in by_name.values() for m in ms)
    kernels = [_kernel(name, ms, total, calls) for name, ms in by_name.items()]
    return sorted(kernels, key=lambda k: k.ms, reverse=True)


def _kernel(name: str, launches: list[dict], total_ms: float, calls: int) -> KernelProfile:
    time_ms = sum(m[_TIME] for m in launches)

    def weighted(metric: str) -> float | None:
        have = [m for m in launches if metric in m]
        weight = sum(m[_TIME] for m in have)
        if not have:
            return None
        return sum(m[metric] * m[_TIME] for m in have) / weight if weight else sum(m[metric] for m in have) / len(have)

    fields = {field: weighted(metric) for metric, field in _FIELDS.items()}
    if fields["registers"] is not None:
        fields["registers"] = round(fields["registers"])
    stalls = {s.replace("_", " "): v for s in _STALLS if (v := weighted(_STALL.format(s))) is not None}
    return KernelProfile(name=name, launches=max(1, round(len(launches) / calls)), ms=time_ms / calls,
                         share=time_ms / total_ms if total_ms else 0.0,
                         stalls=dict(sorted(stalls.items(), key=lambda kv: kv[1], reverse=True)), **fields)


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", "").strip())
    except ValueError:
        return None
