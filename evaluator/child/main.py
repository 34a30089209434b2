"""Entry point of an evaluator child process: `python -m evaluator.child.main REQUEST_FD RESULT_FD`.

Roles: `compile` (import the candidate, which builds it), `candidate` (correctness, leaks, timing of ModelNew),
`reference` (the problem's Model: reference outputs and baseline timings, in a process no candidate touched; it
then stays as the comparer of the problem's candidates' outputs), `introspect` (problem files' bytes and FLOPs,
evaluator.child.introspect), `profile` (a correct candidate's forward calls for Nsight Compute, evaluator.parent.profiling). The request and every message are models of evaluator.protocol.
The candidate role also watches the candidate: which extensions it builds and calls (kernel_watch.py), and
whether it tampers with the harness (guard.py).
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import sys
import traceback
from pathlib import Path
from typing import NamedTuple

import torch

from evaluator import hardware
from evaluator.child import comparer, guard, kernel_watch, leaks, lean_headers, loading, precompiled, timing, trials
from evaluator.child import introspect
from evaluator.sandbox import jail, seccomp
from evaluator.protocol import (CandidateRequest, Check, Cheat, Compiled, Done, Env, Error, Go, IntrospectRequest,
                                LeakMark, Leaks, Loaded, Memory, Message, Outputs, Pace, Probe, Profiled, ProfileRequest,
                                Ready, ReferenceRequest, Rep, Request, Stage, Timing, Trials, WARM_GPU, read_request)


class Channel:
    """The private result pipe. JSON lines; the parent ignores anything the child prints."""

    def __init__(self, fd: int):
        self._fh = os.fdopen(fd, "w", buffering=1)

    def send(self, message: Message) -> None:
        self._fh.write(message.model_dump_json(fallback=str) + "\n")


def _strict_fp32() -> None:
    """Judge in true fp32: TF32 would give the reference (or candidate) a silent 1e-3 error."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (glibc's malloc.h)


def _steady_malloc() -> None:
    """Fix glibc malloc's thresholds, which otherwise adapt at run time: in some processes a call's megabyte-sized
    temporaries came from fresh mmap'd pages every call (~1000 page faults per call, 16-20 ms) and in others from
    the reused heap (0.5 ms), for the same eager code: the bimodal CPU speedups of issue 19. Blocks up to glibc's
    largest threshold (32 MiB) now always come from the heap, and freed memory is not handed back to the kernel
    (a leak still grows in both leak windows). Both roles, so reference and candidate allocate alike."""
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # not glibc (musl): its malloc does not adapt
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, 32 * 2**20)
        mallopt(_M_TRIM_THRESHOLD, 2**30)


def _jail_layers() -> dict[str, str]:
    return json.loads(os.environ.get("KFORGE_JAIL") or '{"jail": "off: not started in the jail"}')


def _own_network() -> bool:
    """Whether the jail gave this child a network namespace of its own (the profile variant, evaluator/sandbox/jail.py):
    only then may its seccomp filter allow IPv4/IPv6 sockets (ncu's injection talks to ncu over loopback)."""
    return _jail_layers().get("network", "").startswith("on")


def _environment(device: str, confined: bool) -> Env:
    layers = _jail_layers()
    layers["seccomp"] = ("on (IPv4/IPv6 sockets allowed: its own network namespace)" if _own_network() else "on") \
        if confined else "off: not x86-64, or not permitted"
    return Env(device_name=hardware.device_name(device), torch_version=torch.__version__,
               cuda_version=torch.version.cuda, confined=confined, sandbox=layers)


def _sync(device: str):
    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


_SNAPSHOT_SHARE = 0.1  # of the device's memory: what a kept snapshot may take (6.4 GB outputs: one)


class Kept(NamedTuple):
    """A timed call's outputs as the keeper holds them: their snapshot, and what was read of them inside the
    timed window (timing.glimpse; None on CPU)."""

    outputs: list
    seen: list | None


class _Keeper:
    """on_rep hook of the timed loop. Each rep's outputs are snapshotted as soon as its timer stopped (stream-
    ordered on CUDA: work left running on another stream or thread is not in them) and the parent is told
    (`ask`) when the round ends, in one message: it draws, at random and out of this process's reach, which of
    them are compared. The snapshots it chose are kept and handed over after timing, as far as `budget` bytes
    hold them (beyond, at once): handoffs inside the timed loop (a file written, the comparer's work on the
    timing core) timed an identical candidate at 0.87x its reference with a core hogged. The snapshot of
    every rep that may be the last is kept (each replacing the one before) and handed over after timing: a
    candidate that goes wrong at the end is seen too. Snapshots wait only while they fit `budget` bytes
    together, and at most a round's worth (timing.ROUND) where no round is paced; outputs larger than that are
    handed over as they are, never copied (a copy beside a 6.4 GB output ran an H100 out of memory)."""

    def __init__(self, ask, save, label, budget: int):
        self.ask, self.save, self.label, self.budget = ask, save, label, budget
        self.told: list[tuple[int, str, Kept]] = []  # (rep, label, snapshot) not yet asked about
        self.least = 1
        self.chosen: dict[str, Kept] = {}  # snapshots the parent asked for, handed over after timing
        self.held = 0  # their bytes
        self.last: dict[str, Kept] = {}

    def __call__(self, i: int, least: int, checkpoint: bool, out, seen) -> None:
        tensors = trials.as_tensors(out)
        size = trials.nbytes(tensors)
        copied = size <= self.budget
        kept = Kept(trials.snapshot(tensors) if copied else tensors, seen)
        self.told.append((i, self.label(), kept))
        self.least = least
        if checkpoint or not copied or len(self.told) >= timing.ROUND or (len(self.told) + 1) * size > self.budget:
            self._answered()
        if checkpoint and copied:
            self.last = {self.label(): kept}

    def _answered(self) -> None:
        """Ask the parent about the reps held since the last answer, and hand over the ones it chose."""
        told, self.told = self.told, []
        chosen = set(self.ask(told[0][0], len(told), self.least))
        for rep, label, kept in told:
            if rep not in chosen:
                continue
            size = trials.nbytes(kept.outputs)
            if self.held + size <= self.budget:
                self.chosen[label], self.held = kept, self.held + size
            else:
                self.save(kept.outputs, label, kept.seen)

    def take(self) -> dict[str, Kept]:
        """The chosen snapshots and the last, handed over once (the keeper keeps none of them)."""
        taken, self.chosen, self.last, self.held = self.chosen | self.last, {}, {}, 0
        return taken


def _snapshot_budget(device: str) -> int:
    return int(_SNAPSHOT_SHARE * hardware.device_memory(device))


def _timed(call):
    """The timed call as both sides make it: right after the model returns, still inside the timed window, any
    profile or trace hook is cleared. One left by forward() would run candidate code between the timer's stop
    and the snapshot, doing then the work the call skipped (tests/adversarial/relu/profile_hook.py: `correct`
    at 34x its honest kernel). Work a thread queues after the timer is shut out by what the window reads of
    the outputs (timing.touch, timing.glimpse)."""
    def timed():
        out = call()
        sys.setprofile(None)
        sys.settrace(None)
        return out
    return timed


def _bench(call, req: CandidateRequest | ReferenceRequest, **hooks) -> list[float]:
    t = req.timing
    with torch.no_grad():
        return timing.bench(call, req.device, t.warmup_ms, t.rep_ms, t.min_reps, t.max_reps, rel_ci=t.rel_ci, **hooks)


def _time(chan: Channel, req: CandidateRequest | ReferenceRequest, call, fresh: trials.FreshInputs, **hooks) -> None:
    """Times the model on fresh inputs; the parent clocks the timed loop from the `timed` stage message to the
    samples."""
    chan.send(Stage(stage="timing"))
    untimed: list[int] = []

    def mark(calls: int) -> None:
        untimed.append(calls)
        chan.send(Stage(stage="timed"))

    samples = _bench(call, req, mark=mark, fresh=fresh, **hooks)
    chan.send(Timing(which="model", samples=samples, untimed_calls=untimed[0], fresh_inputs=fresh.policy(),
                     fill_s=fresh.timed_fill_s))


def _probe(req: CandidateRequest, model, problem, fresh: trials.FreshInputs, changed: bool, kept: dict[str, Kept],
           save, handed: set[str]) -> Probe:
    """The last timed call's outputs (unless already handed over), then one more call after fresh data was
    written into the same input tensors."""
    device = req.device
    _sync(device)()
    inputs, changed = fresh.inputs, changed or fresh.changed()
    outputs = {label: save(held.outputs, label, held.seen) for label, held in kept.items() if label not in handed}
    kept.clear()
    trials.refill(inputs, problem, req.verify_seed, device)
    with torch.no_grad():
        value = model(*inputs)
    _sync(device)()
    outputs["verify"] = save(trials.as_tensors(value), "verify")
    return Probe(outputs=outputs, inputs_changed=changed)


def _memory(chan: Channel, device: str) -> None:
    if device == "cuda":
        chan.send(Memory(peak_cuda_allocated=torch.cuda.max_memory_allocated(), host_rss=leaks.rss()))


def _ask(chan: Channel, requests, message: Message, doing: str) -> bytes:
    """Send a message the parent answers, and wait for its answer line."""
    chan.send(message)
    line = requests.readline()
    if not line:
        raise RuntimeError(f"kforge stopped answering while {doing}")
    return line


def _pacer(chan: Channel, requests):
    """The candidate's timed rounds, paced by the parent (evaluator/verdict/pacing.py): before each round it times the
    reference beside the last one, and says whether to go on."""
    def pace(at: timing.Pace) -> bool:
        message = Pace(which=at.first, reps=at.reps, last_round=at.last_round, least=at.least)
        return Go.model_validate_json(_ask(chan, requests, message, "it timed the reference")).go
    return pace


def _handoff(chan: Channel, requests, req: CandidateRequest):
    """The candidate's saver: each call's outputs go to the comparer, and the child waits until they are judged."""
    def send(label: str, outputs: list[dict]) -> None:
        _ask(chan, requests, Outputs(which=label, outputs=outputs), "the outputs were judged")
    return trials.handoff(Path(req.out_dir), req.device, send)


def _asker(chan: Channel, requests):
    """After a round of timed calls: which of them the parent wants handed over."""
    def ask(first: int, reps: int, least: int) -> list[int]:
        message = Rep(which=first, reps=reps, least=least)
        return Check.model_validate_json(_ask(chan, requests, message, "it chose the checks")).checked
    return ask


def _marker(chan: Channel, requests, device: str):
    """The leak check's marks on a GPU: the child waits at each while the parent reads its device memory."""
    def mark(which: int) -> None:
        if device == "cuda":
            _ask(chan, requests, LeakMark(which=which), "it read the device memory")
    return mark


def _run_candidate(chan: Channel, req: CandidateRequest, model, problem, watch: kernel_watch.KernelWatch, check, save,
                   pace, mark, ask) -> None:
    """Correctness (watched), leak check, timing with output snapshots, and a stale-result probe."""
    device = req.device
    chan.send(Stage(stage="correctness"))
    report = trials.run_trials(model, problem, req.seeds, device, save, _sync(device), watch)
    chan.send(Trials(trials=report))
    check("correctness")
    inputs = trials.make_inputs(problem, req.timing_seed, device)
    fresh = trials.FreshInputs(inputs, problem, req.timing_seed, device)
    call = lambda: model(*inputs)  # noqa: E731
    chan.send(Stage(stage="leak"))
    fastest = min((t["call_ms"] for t in report.values()), default=0.0)
    growth, calls = leaks.measure_growth(call, device, req.leak_calls, fastest, mark)
    chan.send(Leaks(growth=growth, calls=calls))
    check("leak")
    if req.timing.enabled:
        changed = fresh.changed()  # by the leak check's calls: the fills below overwrite the inputs
        handed: set[str] = set()

        def hand(tensors: list, label: str, seen: list | None) -> None:
            handed.add(label)
            save(tensors, label, seen)
        keeper = _Keeper(ask, hand, fresh.label, _snapshot_budget(device))
        _time(chan, req, _timed(call), fresh, on_rep=keeper, pace=pace if req.timing.paired else None)
        check("timing")
        chan.send(Stage(stage="probe"))
        chan.send(_probe(req, model, problem, fresh, changed, keeper.take(), save, handed))
        check("probe")
    _memory(chan, device)


def _footprint(device: str, expected: comparer.Expected) -> int:
    if device != "cuda":
        return expected.held
    torch.cuda.empty_cache()  # what stays reserved is what the comparer holds while candidates run
    return torch.cuda.memory_reserved()


def _run_reference(chan: Channel, req: ReferenceRequest, model, problem, requests) -> None:
    """Reference outputs for every seed the candidate will see (kept on the device as far as the budget goes),
    baseline timings, then serve as the comparer of this problem's candidates until told to close."""
    device = req.device
    expected = comparer.Expected(model, problem, dict(req.seeds), device, req.resident_bytes)
    chan.send(Stage(stage="correctness"))
    report = trials.run_trials(model, problem, req.seeds, device, expected.keep, _sync(device))
    chan.send(Trials(trials=report))
    timer = None
    if req.timing.enabled:
        inputs = trials.make_inputs(problem, req.timing_seed, device)
        fresh = trials.FreshInputs(inputs, problem, req.timing_seed, device)  # timed as the candidate is
        expected.timed = fresh
        timer = comparer.Timer(_timed(lambda: model(*inputs)), fresh, device)  # and beside each round
        _time(chan, req, timer.call, fresh)
        if req.compile_baseline:
            compiled = torch.compile(model)
            chan.send(Timing(which="compiled", samples=_bench(_timed(lambda: compiled(*inputs)), req, fresh=fresh)))
            del compiled
    chan.send(Stage(stage="footprint"))
    _memory(chan, device)
    judge = comparer.Comparer(expected, req.atol, req.rtol, timer)
    audit = judge.audit() if req.audit else []
    chan.send(Stage(stage="serving"))
    chan.send(Ready(footprint=_footprint(device, expected), audit=audit))
    comparer.serve(chan, requests, judge)


def _pin(gpu: str | None) -> None:
    """The device comes with the request (the child may have started before one was free), unless the child was
    started for its problem's GPU (_warm_cuda), which must be the one given. CUDA reads the variable when it
    initialises, which nothing else in this process may have done."""
    if gpu is None:
        return
    warmed = os.environ.get(WARM_GPU)
    if warmed is not None and warmed != gpu:
        raise RuntimeError(f"kforge: the child was started for GPU {warmed} but given GPU {gpu}")
    if warmed is None:
        if torch.cuda.is_initialized():
            raise RuntimeError("kforge: CUDA was initialised before the child's GPU was pinned")
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu


def _warm_cuda() -> None:
    """A child started for its problem's GPU (evaluator/parent/batch.py sets WARM_GPU) initialises CUDA and makes its
    context before it says `loaded`, while another child holds the GPU: ~0.3 s on the H100
    (benchmarks/cuda_start_cost.py), paid ten times by the seeds and repairs while holding it. No kernel runs.
    Its context grows the device's used memory inside the running candidate's leak windows, which is why this
    is done only where the leak check reads each candidate's own processes (evaluator.sandbox.gpumemory)."""
    gpu = os.environ.get(WARM_GPU)
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
        torch.cuda.init()
        torch.cuda.synchronize()  # the context itself


def _serve(chan: Channel, req: Request, confined: bool, requests) -> None:
    chan.send(Stage(stage="setup"))  # the request is in: what the child loaded before it is the parent's `start`
    if _own_network() and not isinstance(req, ProfileRequest):
        raise RuntimeError(f"kforge: a {req.role} child must not run in the profile jail (its network is open)")
    if isinstance(req, IntrospectRequest):
        chan.send(_environment("cpu", confined))
        return _run_introspect(chan, req)
    device = req.device
    _pin(req.gpu)
    _strict_fp32()
    if device == "cpu":
        torch.set_num_threads(req.cpu_threads)  # reference and candidate get the same cores
        _steady_malloc()
    chan.send(_environment(device, confined))
    problem = loading.load_problem(Path(req.problem_path), req.overrides)
    if isinstance(req, ReferenceRequest):
        chan.send(Stage(stage="init"))
        return _run_reference(chan, req, trials.build_model(problem.Model, problem, req.init_seed, device), problem, requests)
    build_dir, candidate = Path(os.environ["TORCH_EXTENSIONS_DIR"]), Path(req.candidate_path)
    headers = precompiled.Headers(build_dir.parent)  # the build root: shared by every candidate's build
    headers.install()  # both roles: the candidate child must write the same build.ninja, or ninja rebuilds
    lean_headers.install()  # the same: a .cu built lean (or full after a failed lean build) loads as it was built
    if isinstance(req, ProfileRequest):
        jail.narrow_profile_target()  # before any candidate code: its /proc is its own, not ncu's
        module = loading.import_file(candidate, "kforge_candidate")  # the cache's build: nothing is compiled
        return _run_profile(chan, req, trials.build_model(module.ModelNew, problem, req.init_seed, device), problem)
    watch = kernel_watch.KernelWatch(Path(problem.__file__))
    watch.install()
    judge = guard.Guard(guard.harness_modules(problem))
    chan.send(Stage(stage="compile"))
    module, seconds, cached = loading.load_candidate(candidate, build_dir)
    chan.send(Compiled(seconds=seconds, cache_hit=cached, steps={} if cached else loading.build_steps(build_dir),
                       headers=lean_headers.builds))
    if isinstance(req, CandidateRequest):
        chan.send(watch.report)
        judge.check("at import", dispatcher=False)  # the dispatcher is read once, last (see Guard.check)
        chan.send(Stage(stage="init"))
        model = trials.build_model(module.ModelNew, problem, req.init_seed, device)
        judge.check("in __init__", dispatcher=False)
        _run_candidate(chan, req, model, problem, watch,
                       lambda stage: judge.check(f"during {stage}", dispatcher=stage == "probe"),
                       _handoff(chan, requests, req), _pacer(chan, requests),
                       _marker(chan, requests, device), _asker(chan, requests))


def _run_profile(chan: Channel, req: ProfileRequest, model, problem) -> None:
    """A warm-up call (module load and first-call setup stay out of the profile), then `calls` forward calls, each
    alone inside the NVTX range `kforge_forward` that ncu is told to profile (--nvtx-include kforge_forward/)."""
    inputs = trials.make_inputs(problem, req.input_seed, "cuda")
    with torch.no_grad():
        model(*inputs)
        torch.cuda.synchronize()
        for _ in range(req.calls):
            torch.cuda.nvtx.range_push("kforge_forward")
            model(*inputs)
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
    chan.send(Profiled(calls=req.calls))


def _run_introspect(chan: Channel, req: IntrospectRequest) -> None:
    """Each problem file in turn: one that raises is answered with its error and the next goes on (a hang or a
    crash is the parent's to see and name)."""
    for path in req.problem_paths:
        chan.send(introspect.measure(path, req.overrides.get(path, {})))


def _said(exc: BaseException) -> str:
    """What the failure says, with a CUDA out-of-memory named as one: PyTorch's allocator, before it raises its
    out-of-memory error, asks NVML for the device's processes, and NVML does not start in the jail, so what comes
    out is an internal assert that says nothing of memory (seen on the H100, stop 36)."""
    text = str(exc)
    if "nvmlInit_v2_" in text and "CUDACachingAllocator" in text:
        return (f"CUDA out of memory: an allocation failed and PyTorch's report of it stopped at NVML, which the jail "
                f"withholds ({text})")
    return text


def main(request_fd: int, result_fd: int) -> None:
    """The child's whole life (never returns): its own interpreter's, or a fork of evaluator/sandbox/forkserver.py's."""
    confined = seccomp.forbid_touching_parent(network=_own_network())  # before any candidate or problem code runs
    gc.freeze()  # what is loaded so far: the leak check's gc.collect() walks only what comes after (80 ms -> 17 us)
    requests = os.fdopen(request_fd, "rb")  # the request, then (reference, candidate) the parent's answers
    chan = Channel(result_fd)
    try:
        _warm_cuda()
        chan.send(Loaded())  # the parent gives a device only to a child that is ready to use it
        _serve(chan, read_request(requests.readline()), confined, requests)
    except guard.Tampered as exc:
        chan.send(Cheat(exploit="judge_tampering", detail=f"replaced what the judge relies on {exc}"))
        sys.stdout.flush()
        os._exit(3)
    except BaseException as exc:  # noqa: BLE001 - every failure of candidate code is a verdict, not a crash
        chan.send(Error(exc_type=type(exc).__name__, message=_said(exc)[-4000:], traceback=traceback.format_exc()[-6000:]))
        sys.stdout.flush()
        os._exit(1)
    chan.send(Done())
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: a candidate's broken CUDA context must not hang the exit


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
