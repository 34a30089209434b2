"""One batch's shared state: its secret seeds, scratch space, devices, and the jail every child of it runs in."""

from __future__ import annotations

import hashlib
import os
import platform
import secrets
import tempfile
import threading
import weakref
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import torch

from evaluator.build import BUILD_TIMEOUT_S, lean_headers, nvcc_driver, precompiled
from evaluator.parent import buildcache, leases
from evaluator.sandbox import cgroups, disk, gpumemory
from evaluator.contracts import EvalSettings, EvaluatorError
from evaluator.hardware import device_memory, visible_gpus
from evaluator.parent.jail_spec import jail_spec, require_layers
from evaluator.parent.sharing import Sharer, Sharing
from evaluator.protocol import (WARM_GPU, CandidateRequest, CompileRequest, ReferenceRequest, Request, ServeRequest,
                                TimingRequest)
from evaluator.sandbox.results import ChildResult
from evaluator.sandbox.budgets import COMPILER_IDLE_S
from evaluator.sandbox.spawn import TRITON_ON_CPU, Child, run_tool
from reference_problems import Problem

DEFAULT_BUILD_ROOT = Path.home() / ".cache" / "kforge" / "builds"
_REQUESTS = {"compile": CompileRequest, "candidate": CandidateRequest, "reference": ReferenceRequest,
             "serve": ServeRequest}
CLOSING_SHARE = 0.5  # of device memory: comparers still closing there, with what a new reference will hold (Batch.settle)
# Compiles (and their compilers) run at this nice value, their session's too (cgroups.lower_priority): where they
# fill the cores, the scheduler favours the children that hold a GPU and the parent's relay. The GPU waits on those,
# a compile's queue does not. It does not remove what compiles cost two GPUs' judging: on two H200s their cold holds
# summed to 241-249 s against 221-232 s warm or on one GPU, with compiles at a tenth of a judging child's CPU weight
# too (docs/benchmarks.md): not CPU time taken from the judging.
COMPILE_NICE = 10
BESIDE_SHARE = 0.75  # of device memory: in use, with what a reference beside a candidate's last stages will hold (Batch.join)
# CPU children's malloc backs its heap with 2 MB pages (transparent huge pages, madvised; a no-op where THP is
# off). Which 4 KB physical pages a process got decided where its tensors fell in the caches, and so its speed:
# the same work timed 0.79-1.18x between fresh process pairs with 4 KB pages, 0.93-1.11x with 2 MB pages.
CPU_CHILD_ENV = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
# A comparer's timing stream is held on a host word (child.cuda_fills.Gate) while it queues a call's steps behind
# it, and a kernel CUDA loads lazily, at its first launch, blocks the launching thread until that stream moves: on
# the H100 host the comparer's first flush waited on its own gate for good (each call ran into its 27 s budget).
# Loaded at the process's start instead: 3.0 s more there (0.33 -> 3.37 s), and no launch waits.
EAGER_LOADING = {"CUDA_MODULE_LOADING": "EAGER"}


def cpu_cores(threads: int, allowed: set[int]) -> tuple[set[int], set[int]]:
    """(timing cores, the others) on CPU: the last `threads` of the cores kforge may use time every reference and
    candidate; kforge's other children (compiles, of every submitter) run on the rest. The same work timed on
    two cores of this VM by two fresh processes measured 0.73-1.38x; on one core, 0.92-1.07x. Where no core is
    left over, the others share them."""
    ordered = sorted(allowed)
    timed = set(ordered[-threads:])
    return timed, (set(ordered) - timed) or timed


class Batch:
    """Secrets and scratch space shared by one evaluate() call. `per_device`: the children that run at once on
    each device beside the compiles, among which the machine's memory is shared (Batch.compile_slots)."""

    def __init__(self, settings: EvalSettings, per_device: int = 1):
        self.gpus = (settings.gpus or visible_gpus()) if settings.device == "cuda" else [None]
        if not self.gpus:
            raise EvaluatorError("no CUDA device is visible (check CUDA_VISIBLE_DEVICES or --gpus)")
        planned = compile_plan(settings)
        self.compile_slots, self.compile_why = planned.slots, planned.why
        self.settings = _sized(settings, self.compile_slots + per_device * len(self.gpus))
        disk.sweep(Path(tempfile.gettempdir()))  # the disks of a kforge killed without cleanup
        # honours TMPDIR (e.g. /dev/shm for big outputs); named for this process, so a later one can tell it is gone
        self.root = Path(tempfile.mkdtemp(prefix=f"kforge-eval-{os.getpid()}-"))
        self.root.chmod(0o711)  # children running as another uid reach their own folders in it, and list none
        # the disks of candidates a batch stopped before judging, which an rmtree of the root cannot unmount
        self.release = weakref.finalize(self, disk.release, self.root)
        self.disks: dict[Path, dict] = {}  # a candidate's dir -> its disk, as its children's jail specs say it
        self.init_seed = secrets.randbits(31)
        self.trial_seeds = [(f"trial_{i}", secrets.randbits(31)) for i in range(settings.trials)]
        self.timing_seed, self.verify_seed = secrets.randbits(31), secrets.randbits(31)
        self.build_root = settings.build_root or DEFAULT_BUILD_ROOT
        # (timing cores, the others) where the device is the CPU; a GPU's children run where the scheduler puts them
        self.cores = cpu_cores(settings.cpu_threads, os.sched_getaffinity(0)) if settings.device == "cpu" else (None, None)
        self._check_sandbox()
        # children make their CUDA context on their problem's GPU before they hold it (child._warm_cuda), which a
        # running candidate's leak check would count unless it reads that candidate's own processes
        self._warms = settings.device == "cuda" and not gpumemory.unavailable()
        self.stop = threading.Event()  # set when the batch ends early: running children are stopped
        self.headers: ThreadPoolExecutor | None = None  # where evaluate() builds precompiled headers off the compiles' path
        self._free = set(self.gpus)
        self._freed = threading.Condition()
        self._locks: dict[str | None, int] = {}
        self._leases: dict[str | None, leases.Lease] = {}
        self._closing: dict[str | None, list[int]] = {}  # device -> the bytes each comparer closing there holds
        self._room: dict[str | None, int] = {}  # device -> bytes its holder's last stages leave a reference (open_beside)
        self._beside: set[str | None] = set()  # devices where a reference runs beside the holder, first to take them next
        self._settled = threading.Condition()
        self._kept: dict[str | None, int] = {}  # device -> its lease, kept between holders while its sharers run
        self._next: Counter = Counter()  # device -> its sharers waiting to take it, ready to be timed (they go first)
        self.sharing = Sharing(self.shares())

    def _check_sandbox(self) -> None:
        """Probe the jail once: in strict mode a missing layer stops the batch before any child runs."""
        try:
            require_layers(self.root, self.settings.sandbox)
        except EvaluatorError:
            self.release()
            raise

    def new_disk(self, path: Path) -> Path:
        """A candidate's dir: made, with its disk mounted on it (evaluator/sandbox/disk.py), which holds all its
        compile and candidate children write, each in a dir of its own inside."""
        path.mkdir(mode=0o711)
        self.disks[path] = disk.mount(path)
        return path

    def jail(self, workdir: Path, build_dir: Path, problem: Problem, candidate: Path | None = None,
             exchange: Path | None = None) -> dict:
        """The file rules of one child: its scratch writable; its problem and candidate files readable. A child
        of a candidate sees the build cache through its view (buildcache.py): it writes only its own build dir
        there, which the parent publishes from a compile child, and reads the precompiled headers; its scratch
        and view lie in its candidate's disk (new_disk).
        A reference child, the comparer, builds nothing; it reads the batch's scratch and stays in kforge's PID and
        mount namespaces: on CUDA legacy IPC handles are reported not to open between sibling PID namespaces, while
        one from a namespaced producer opened in a process outside them on the H100 host; on CPU the candidates'
        outputs arrive as files in their disks, mounted in kforge's namespace after the comparer started (a
        private mount namespace would not see them)."""
        served = [exchange] if exchange else []  # a forward server's inputs file, read (evaluator.exchange)
        if candidate is None:  # the comparer, or the reference's forward server (`exchange`), jailed as a candidate's
            return jail_spec([workdir], [problem.path, *served]) if exchange else \
                jail_spec([workdir, build_dir], [problem.path, self.root], namespaces=False)
        view = buildcache.view(self.build_root, build_dir, workdir)
        return jail_spec([workdir], [problem.path, candidate.resolve(), self.build_root / "pch", *served], view=view) | \
            {"disk": self.disks.get(workdir.parent)}

    def tool(self, scratch: Path) -> buildcache.Tool:
        """Runs a compiler in the jail, writing only `scratch` and reading the precompiled headers' folder (the
        header it compiles is linked there); stopped with the batch; on CPU off the timing cores, as compiles are."""
        scratch.mkdir(parents=True, exist_ok=True)
        (self.build_root / "pch").mkdir(parents=True, exist_ok=True)  # made now, so the jail sees whether it can reach it
        spec = jail_spec([scratch], [self.build_root / "pch"])
        limits = self.settings.limits.model_copy(update={"timeout_s": BUILD_TIMEOUT_S})
        return lambda cmd, log: run_tool(cmd, scratch, spec, limits, log, self.stop, self.cores[1], COMPILE_NICE)

    def reference_seeds(self) -> list[tuple[str, int]]:
        """The reference computes every output a candidate is checked against: its trials, timed and verify calls."""
        return self.trial_seeds + [("timing", self.timing_seed), ("verify", self.verify_seed)]

    def _secrets(self, role: str) -> dict:
        """Seeds for the roles that run the model; the compile child, which only imports candidate code (and
        could stash what it sees for the candidate child), gets none. The candidate runs its trials shuffled."""
        if role in ("compile", "serve"):  # a server's inputs are the comparer's to make
            return {}
        seeds = self.reference_seeds() if role == "reference" \
            else secrets.SystemRandom().sample(self.trial_seeds, len(self.trial_seeds))
        if role == "candidate" and self.trusted_timing():  # its timed and verify inputs are the comparer's to make:
            draw = secrets.SystemRandom().getrandbits  # it gets seeds of its own, for its leak check's inputs alone
            return {"seeds": seeds, "timing_seed": draw(31), "verify_seed": draw(31)}
        return {"seeds": seeds, "timing_seed": self.timing_seed, "verify_seed": self.verify_seed}

    def trusted_timing(self) -> bool:
        """Whether candidates are timed through forward exchanges (evaluator.parent.trusted_timing), with paired
        rounds: on CPU where EvalSettings.forward_server asks for it, on CUDA where cuda_forward_server does."""
        s = self.settings
        return s.forward_server and (s.device == "cpu" or s.cuda_forward_server) and s.timing and s.paired

    def shares(self) -> int:
        """How many candidates run at once on one device, one holding it and the others sharing it for their
        untimed stages (sharing.py): EvalSettings.untimed_share, or 2 on CUDA and 1 on CPU; sharing needs the
        candidates' timed stages to be the parent's (trusted_timing), so that it knows when they begin."""
        s = self.settings
        share = s.untimed_share or (2 if s.device == "cuda" else 1)
        return share if self.trusted_timing() else 1

    def pairs(self, role: str = "candidate") -> int:
        """The fresh process pairs (reference, candidate) a correct candidate is timed in: on CPU with paired
        rounds, settings.cpu_pairs, each timing a share of rep_ms; else 1. Where the kernel puts a process's data
        and page tables moves its speed for its whole life, and a pair's ratio carries that draw: an identical
        candidate timed 0.85-1.14x in single fresh pairs (benchmarks/cpu_pairing.py; two bare processes with the address layout
        fixed, still 0.90-1.10x). Pooled over 3 pairs: 0.91-1.08x in 20 evaluations (benchmarks/cpu_pairing.py)."""
        s = self.settings
        return s.cpu_pairs if role == "candidate" and s.device == "cpu" and s.timing and s.paired else 1

    def request(self, role: str, problem: Problem, out_dir: Path, candidate: Path | None = None, **extra) -> Request:
        """The request of a compile, candidate or reference child, as the protocol types it."""
        s = self.settings
        out_dir.mkdir(parents=True, exist_ok=True)
        if candidate is not None:
            extra.update(candidate_path=str(candidate.resolve()), language=s.language)
        timing = TimingRequest(enabled=s.timing, warmup_ms=s.warmup_ms, rep_ms=s.rep_ms / self.pairs(role),
                               min_reps=s.min_reps, max_reps=s.max_reps, rel_ci=s.rel_ci, paired=s.paired)
        atol, rtol = s.tolerance(problem)
        return _REQUESTS[role](
            problem_path=str(problem.path), device=s.device, overrides=problem.overrides(s.size),
            init_seed=self.init_seed, atol=atol, rtol=rtol, out_dir=str(out_dir), leak_calls=s.leak_calls,
            compile_baseline=s.compile_baseline, cpu_threads=s.cpu_threads, timing=timing, precision=s.precision,
            **self._secrets(role), **extra,
        )

    def spawn(self, workdir: Path, build_dir: Path, problem: Problem, candidate: Path | None = None,
              on_message: Callable[[dict], dict | None] | None = None, publish: bool = False,
              gpu: str | None = None, exchange: Path | None = None, clocks: bool = False) -> Child:
        """An evaluator child in its jail, started (interpreter and torch load) but not yet given its request. On
        CPU a compile child (`publish`) runs off the timing cores, any other on them (it is spawned once the CPU
        is held, and its reference is timed beside it there). A child timed on CPU is its own interpreter, not
        forked: children forked from one server share its address-space layout, and an identical candidate then
        timed 0.76-1.02x its reference, every time below 1 (benchmarks/cpu_pairing.py); exec'd, 0.94-1.21x around
        1, each process placed at random. A child that will run on `gpu` (its problem's) makes its CUDA context
        there while it waits (child._warm_cuda), where the leak check reads each candidate's own device memory.
        `clocks`: a comparer, which on CUDA clocks forward servers behind a held stream and so loads every kernel
        at its start (EAGER_LOADING)."""
        cpu = self.settings.device == "cpu"
        timed_on_cpu = cpu and not publish
        warm = {WARM_GPU: gpu} if self._warms and gpu is not None and not publish else {}
        if clocks and not cpu and self.trusted_timing():
            warm |= EAGER_LOADING
        return Child(workdir, build_dir, self.settings.limits, cap_address_space=cpu, stop=self.stop, on_message=on_message,
                     jail=self.jail(workdir, build_dir, problem, candidate, exchange),
                     env=CPU_CHILD_ENV | self._interpreter(candidate) if timed_on_cpu else warm or None,
                     cores=self.cores[1 if publish else 0], fork=not timed_on_cpu,
                     idle_s=COMPILER_IDLE_S if publish else None, nice=COMPILE_NICE if publish else 0)

    def _interpreter(self, candidate: Path | None) -> dict[str, str]:
        """The environment that runs a CPU child's Triton kernels interpreted, for a Triton candidate on CPU."""
        interprets = candidate is not None and self.settings.interprets(candidate.read_text(errors="replace"))
        return TRITON_ON_CPU if interprets else {}

    def run(self, role: str, problem: Problem, workdir: Path, build_dir: Path, candidate: Path | None = None,
            gate: Callable[[], str | None] | None = None, **extra) -> ChildResult:
        """A child from start to end: spawned, its request sent once the gate (if any) opens, waited for."""
        child = self.spawn(workdir, build_dir, problem, candidate, publish=role == "compile")
        try:
            child.begin(self.request(role, problem, workdir / "out", candidate, **extra), gate=gate)
        except BaseException:
            child.finish(wait=False)
            raise
        return child.finish()

    def take_device(self, want: str | None = None, joined: bool = False, first: bool = False) -> str | None:
        """A free device of the batch, or device `want` (waits for it); gives up when the batch is stopped. A device
        is also leased against every other kforge process on this machine (leases.py: an flock, released by the
        kernel if this process dies, and a line in which they take turns): two submitters never time or leak-check
        on one GPU (or the CPU) at the same time. A device where a reference runs beside its holder goes to that
        reference next (`joined`: the caller is it), so what it made is timed without waiting behind others; then to
        a candidate that shared it and is ready to be timed (`first`), ahead of candidates that have not begun."""
        return self.take_or_share(want, joined, first=first)[0]

    def take_or_share(self, want: str | None = None, joined: bool = False, share: str = "",
                      fits: Callable[[str | None], bool] = lambda device: True,
                      first: bool = False) -> tuple[str | None, Sharer | None]:
        """take_device, or where `share` names a candidate (and sharing.py admits it: a slot, nothing timed there,
        `fits(device)`), a place beside the holder of a device this batch holds, whichever comes first: (the
        device, None) taken, (the device, its Sharer) shared."""
        with self._freed:
            tried: set[str | None] = set()
            self._next[want] += first
            try:
                return self._take_or_share(want, joined, share, fits, first, tried)
            finally:
                self._next[want] -= first

    def _take_or_share(self, want: str | None, joined: bool, share: str, fits: Callable[[str | None], bool],
                       first: bool, tried: set[str | None]) -> tuple[str | None, Sharer | None]:
        """take_or_share's wait, with self._freed held."""
        while not self.stop.is_set():
            free = [want] if want in self._free else [] if want is not None else sorted(self._free, key=str)
            for device in free:
                if (device in self._beside and not joined) or (self._next[device] and not (first or joined)):
                    continue
                lock = self._reuse(device) if device in self._kept else self._lease(device).take()
                tried.add(device)
                if lock is not None:
                    self._free.discard(device)
                    self._beside.discard(device)
                    self._locks[device] = lock
                    self._leave(tried - {device})
                    return device, None
            for device in [d for d in ([want] if want is not None else self.gpus) if d in self._locks] if share else []:
                if sharer := self.sharing.admit(device, share, lambda: fits(device)):
                    self._leave(tried)
                    return device, sharer
            self._freed.wait(timeout=0.25)
        self._leave(tried)
        raise EvaluatorError("the batch was stopped")

    def _reuse(self, device: str | None) -> int:
        """The lease kept for `device`'s sharers, for its next holder: taken without a wait."""
        self._lease(device).waited_s = 0.0
        return self._kept.pop(device)

    def unshare(self, sharer: Sharer) -> None:
        """A sharer leaves its device; the last to leave a device no holder has lets its lease go."""
        with self._freed:
            self.sharing.leave(sharer)
            if sharer.device in self._kept and not self.sharing.active(sharer.device):
                leases.Lease.give_back(self._kept.pop(sharer.device))
            self._freed.notify_all()

    def open_beside(self, device: str | None, room: int) -> None:
        """The holder of `device` is in its last stages, nothing of it timed any more (its timed rounds ended,
        Pacer.ended): one trusted reference that will hold at most `room` bytes may make its outputs there now."""
        with self._freed:
            if device in self._locks:
                self._room[device] = room
                self._freed.notify_all()

    def join(self, want: str | None, room: int) -> bool:
        """`want` for a reference's untimed work: beside its holder once open_beside lets `room` bytes in (False),
        or taken, as take_device takes it, once it is free first (True)."""
        with self._freed:
            while not self.stop.is_set() and not (want in self._free and want not in self._beside):
                if want not in self._beside and self._room.get(want, -1) >= room:
                    self._beside.add(want)
                    return False
                self._freed.wait(timeout=0.25)
        self.take_device(want)
        return True

    def leave_beside(self, device: str | None) -> None:
        """A reference that joined `device` ended without taking it."""
        with self._freed:
            self._beside.discard(device)
            self._freed.notify_all()

    def _lease(self, device: str | None) -> leases.Lease:
        if device not in self._leases:
            self._leases[device] = leases.Lease(device)
        return self._leases[device]

    def _leave(self, devices: set[str | None]) -> None:
        for device in devices:
            self._leases[device].leave()

    def device_wait_s(self, device: str | None) -> float:
        """How long the last take of `device` waited for other kforge processes."""
        return self._leases[device].waited_s

    def closing(self, device: str | None, nbytes: int) -> Callable[[], None]:
        """A comparer on `device` letting go of `nbytes` after its device was given back (references.OpenProblems
        closes it beside what runs next): registered now, before the give-back; the call returned says it is gone."""
        with self._settled:
            self._closing.setdefault(device, []).append(nbytes)

        def gone() -> None:
            with self._settled:
                self._closing[device].remove(nbytes)
                self._settled.notify_all()
        return gone

    def settle(self, device: str | None, room: int | None = None) -> None:
        """Wait until no comparer is closing on `device`: before anything is timed there (`room` None), so a
        process letting go of its memory never runs beside a timed call; before a reference allocates, only until
        the comparers still closing and the `room` it will hold fit within CLOSING_SHARE of the device's memory."""
        limit = None if room is None else CLOSING_SHARE * device_memory(self.settings.device)
        with self._settled:
            while self._closing.get(device) and not self.stop.is_set() \
                    and (limit is None or sum(self._closing[device]) + room > limit):
                self._settled.wait(timeout=0.25)

    def give_back(self, device: str | None) -> None:
        with self._freed:
            self._room.pop(device, None)
            lock = self._locks.pop(device, None)
            if lock is not None and self.sharing.active(device):
                self._kept[device] = lock  # its sharers still run: no other kforge process may time there
            elif lock is not None:
                leases.Lease.give_back(lock)
            self._free.add(device)
            self._freed.notify_all()


def _sized(settings: EvalSettings, children: int) -> EvalSettings:
    """The settings with each child's memory and task limits sized to this machine for `children` at once."""
    memory_mb, processes = cgroups.child_share(settings.limits.memory_mb, settings.limits.processes, children)
    return settings.model_copy(update={"limits": settings.limits.model_copy(update={"memory_mb": memory_mb,
                                                                                     "processes": processes})})


def compile_plan(settings: EvalSettings) -> cgroups.CompilePlan:
    """How many compiles a batch with these settings runs at once, and why. On CPU the cores that time reference
    and candidate are left out (where any others are left)."""
    allowed = os.sched_getaffinity(0)
    timed, others = cpu_cores(settings.cpu_threads, allowed) if settings.device == "cpu" else (set(), allowed)
    return cgroups.compile_plan(settings.jobs, len(others if others != timed else allowed), settings.device)


def build_key(source: str, device: str) -> str:
    """Builds are reusable exactly when source, toolchain, target and the way kforge builds are the same."""
    arch = torch.cuda.get_arch_list() if device == "cuda" else [platform.machine()]
    material = "\0".join([source, torch.__version__, str(torch.version.cuda), device, ",".join(arch), platform.python_version(),
                          lean_headers.VERSION, nvcc_driver.VERSION])
    return hashlib.sha256(material.encode()).hexdigest()[:24]
