"""A cgroup per child: a process-count limit and a memory limit the kernel enforces on the child and everything
it starts (threads, compilers, a fork bomb), CUDA included (RLIMIT_AS cannot be used there: CUDA reserves huge
virtual ranges).

Which kind, the first that works on this machine (probed once per process; `kforge doctor` and every verdict's
`evidence.sandbox["resources"]` say which, or why none):
- cgroup v2 with the memory and pids controllers: a cgroup per child with pids.max, memory.max, memory.swap.max
  0 and memory.oom_group 1 (the OOM killer ends the whole child, not one of its compilers); what is left when the
  child ends is killed at once through cgroup.kill. As root (the GPU hosts) kforge's children live below the
  root cgroup, which may hold processes; otherwise below kforge's own cgroup, which then must hold no other
  process (a cgroup with processes gives no controllers to its children; e.g. kforge started by
  `systemd-run --user --scope -p Delegate=yes`), and kforge first moves itself into a leaf of it.
- cgroup v1 with writable pids and memory hierarchies (the CPU machines): a cgroup in each, pids.max and
  memory.limit_in_bytes (and memsw, where swap is accounted); what is left is killed pid by pid.
- none: the layer is off and says why. RLIMIT_NPROC is not a substitute: it does not bind root, and it counts
  every process of a uid, so with all children running as one uid a fork bomb in one would starve the compilers
  of the others (a wrong verdict for an honest candidate). The RSS watch and, on CPU, RLIMIT_AS (spawn.py)
  still bound memory; the PID namespace and the wall budget still end a fork bomb.
The child joins its cgroups itself (evaluator/sandbox/jail.py, before anything else), so nothing it starts is outside.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

_CONTROLLERS = ("memory", "pids")
_REMOVE_TRIES = 40  # x 25 ms: an ended child's processes are reaped by then
_FREEZE_WAIT_S = 0.2  # a freeze is asynchronous (v2's freezer and SIGSTOP alike): a thread stops when it is next
# scheduled (milliseconds later on a busy machine), one in uninterruptible sleep when it wakes
_counter = itertools.count()
COMPILE_PEAK_MB = 3_600  # one CUDA extension's compile (nvcc, cicc over torch's headers): 16 at once held 56.6 GB
# of the H100 host's memory
BATCH_RESERVE_MB = 8_192  # the rest of a batch beside its compiles: kforge, its waiting children (the bound measured on the H100 host)


class FreezeIncomplete(RuntimeError):
    """A freeze that did not take within _FREEZE_WAIT_S (a thread sat in an uninterruptible kernel call, or kept
    forking): the processes were let go again, so nothing is left stopped for the caller to undo."""


@dataclass(frozen=True)
class _Layout:
    version: int  # 2, 1, or 0 (none)
    bases: dict[str, Path] = field(default_factory=dict)  # controller (or "unified") -> kforge's dir for children
    why: str = ""


def _own_cgroup(hierarchy: str) -> str:
    """kforge's path in a hierarchy, from /proc/self/cgroup ('' names the v2 one)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if (hierarchy == "" and names == "") or hierarchy in names.split(","):
            return path
    raise OSError(0, f"not in a cgroup {hierarchy or 'v2'} hierarchy")


def _mount(fstype: str, option: str = "") -> Path:
    """Where a cgroup hierarchy is mounted (v1: the one with `option`, its controller), from /proc/self/mounts."""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, where, kind, options = line.split()[:4]
        if kind == fstype and (not option or option in options.split(",")):
            return Path(where)
    raise OSError(0, f"no {fstype} {option} mount".replace("  ", " "))


def _v2_base() -> Path:
    """A cgroup v2 dir whose children may get memory and pids, under the root cgroup (as root: the root is exempt
    from the rule that a cgroup with processes gives no controllers to its children) or else under kforge's own."""
    mount = _mount("cgroup2")
    own = mount / _own_cgroup("").lstrip("/")
    reasons = []
    for parent in dict.fromkeys([mount, own]):
        try:
            return _v2_under(parent, is_root=parent == mount)
        except OSError as exc:
            reasons.append(f"{parent}: {exc.strerror or exc}")
    raise OSError(0, "; ".join(reasons))


def _v2_under(parent: Path, is_root: bool) -> Path:
    """kforge's dir for its children below `parent`. Below a cgroup other than the root, kforge must be alone in
    it, and first moves itself into a leaf of its own."""
    missing = set(_CONTROLLERS) - set((parent / "cgroup.controllers").read_text().split())
    if missing:
        raise OSError(0, f"lacks the {', '.join(sorted(missing))} controller(s)")
    if not is_root:
        if {int(p) for p in (parent / "cgroup.procs").read_text().split()} - {os.getpid()}:
            raise OSError(0, "holds other processes; start kforge in a cgroup of its own "
                             "(systemd-run --scope -p Delegate=yes)")
        leaf = parent / "kforge-parent"
        leaf.mkdir(exist_ok=True)
        (leaf / "cgroup.procs").write_text(str(os.getpid()))
    (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in _CONTROLLERS))
    base = parent / f"kforge-{os.getpid()}"
    base.mkdir(exist_ok=True)
    (base / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in _CONTROLLERS))
    return base


def _v1_bases() -> dict[str, Path]:
    """kforge's own cgroup in the v1 pids and memory hierarchies: v1 lets a cgroup with processes have children."""
    return {c: _mount("cgroup", c) / _own_cgroup(c).lstrip("/") for c in _CONTROLLERS}


@functools.cache
def layout() -> _Layout:
    """The kind of cgroup this process can give its children (probed by making and removing one)."""
    reasons = []
    for version, find in ((2, lambda: {"unified": _v2_base()}), (1, _v1_bases)):
        try:
            where = _Layout(version, find())
            Cgroup.make(where, processes=8, memory_mb=64).close()
        except OSError as exc:
            reasons.append(f"v{version}: {exc.strerror or exc}")
            continue
        if version == 2:
            atexit.register(_rmdir, where.bases["unified"])
        _sweep(where)
        return where
    return _Layout(0, why="off: no cgroup kforge can write (" + "; ".join(reasons) + "); processes are bounded only "
                          "by the PID namespace and the wall budget, memory by the RSS watch (and RLIMIT_AS on CPU)")


class Cgroup:
    """One child's cgroup(s): made with its limits before it starts, joined by the child, closed by the parent."""

    def __init__(self, version: int, dirs: dict[str, Path], said: str):
        self.version, self.dirs, self.said = version, dirs, said

    @classmethod
    def make(cls, where: _Layout, processes: int, memory_mb: int) -> Cgroup:
        name = f"child-{os.getpid()}-{next(_counter)}"
        dirs = {key: base / name for key, base in where.bases.items()}
        for d in dirs.values():
            d.mkdir()
        memory = memory_mb << 20
        if where.version == 2:
            (d,) = dirs.values()
            for knob, value in (("pids.max", processes), ("memory.max", memory), ("memory.swap.max", 0),
                                ("memory.oom_group", 1)):
                if (d / knob).exists():
                    (d / knob).write_text(str(value))
        else:
            (dirs["pids"] / "pids.max").write_text(str(processes))
            (dirs["memory"] / "memory.limit_in_bytes").write_text(str(memory))
            if (dirs["memory"] / "memory.memsw.limit_in_bytes").exists():
                (dirs["memory"] / "memory.memsw.limit_in_bytes").write_text(str(memory))
        return cls(where.version, dirs, f"on (cgroup v{where.version}: {processes} processes, {memory_mb} MB)")

    @property
    def procs(self) -> list[str]:
        """The files the child writes '0' into to join (evaluator/sandbox/jail.py)."""
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def pids(self) -> list[int]:
        """Every process in it, as kforge's PID namespace numbers them."""
        return _pids(next(iter(self.dirs.values())))

    def _memory_dir(self) -> Path:
        return self.dirs.get("memory") or self.dirs["unified"]

    def oom_killed(self) -> bool:
        """Whether the kernel's OOM killer ended something in it (its memory limit was reached)."""
        try:
            if self.version == 2:
                events = (self._memory_dir() / "memory.events").read_text().split()
            else:
                events = (self._memory_dir() / "memory.oom_control").read_text().split()
            return int(dict(zip(events[::2], events[1::2])).get("oom_kill", 0)) > 0
        except (OSError, ValueError):
            return False

    def freeze(self, frozen: bool) -> None:
        """Stop every process in it, or let them go on: cgroup v2's freezer (waited for), else SIGSTOP to each,
        twice (one forked meanwhile), and SIGCONT. Signals from kforge's namespace reach a namespace's init too.
        Raises FreezeIncomplete, with everything let go again, where the freeze did not take in time."""
        d = next(iter(self.dirs.values()))
        if self.version == 2 and (d / "cgroup.freeze").exists():
            (d / "cgroup.freeze").write_text("1" if frozen else "0")
            if frozen and not _wait_for(lambda: "frozen 1" in (d / "cgroup.events").read_text()):
                self.freeze(False)
                raise FreezeIncomplete(f"cgroup v2's freezer had not taken after {_FREEZE_WAIT_S:g} s")
            return
        for _ in range(2 if frozen else 1):
            for pid in _pids(d):
                _signal(pid, signal.SIGSTOP if frozen else signal.SIGCONT)
        if frozen and (running := _wait_stopped(lambda: _pids(d))):
            self.freeze(False)
            raise FreezeIncomplete(running)

    def close(self) -> None:
        """Kill whatever is left in it (the PID namespace normally took it all already) and remove it."""
        d = next(iter(self.dirs.values()))
        for _ in range(_REMOVE_TRIES):
            pids = _pids(d)
            if self.version == 2 and pids:
                (d / "cgroup.kill").write_text("1")
            for pid in pids if self.version == 1 else []:
                _kill(pid)
            if not pids and all(_rmdir(x) for x in self.dirs.values()):
                return
            time.sleep(0.025)


def _sweep(where: _Layout) -> None:
    """Remove the empty cgroups a kforge that was killed (SIGKILL: no cleanup ran) left behind."""
    dead = lambda d: not Path(f"/proc/{d.name.split('-')[1]}").exists()  # noqa: E731 - child-PID-N, kforge-PID
    for base in where.bases.values():
        tops = [base] if where.version == 1 else [d for d in base.parent.glob("kforge-[0-9]*") if d == base or dead(d)]
        for top in tops:
            for d in top.glob("child-[0-9]*-[0-9]*"):
                if dead(d):
                    _rmdir(d)
            if top != base:
                _rmdir(top)


def _pids(d: Path) -> list[int]:
    try:
        return [int(p) for p in (d / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def _wait_stopped(pids: Callable[[], list[int]]) -> str:
    """Wait until every thread of these processes is stopped or gone: kill(SIGSTOP) returns at once, and on 2
    busy cores threads the candidate left spinning went on for milliseconds (into the reference's block beside
    them, slowing it up to 15x) before the scheduler ran them into their stop. '' once they are, else the
    threads still running when the freeze wait passed, and in what state (D: an uninterruptible kernel call)."""
    def running() -> list[str]:
        return [f"{pid}/{task.name}: {state}" for pid in pids() for task in Path(f"/proc/{pid}/task").glob("*")
                if (state := _state(task)) not in "TtZX"]
    if _wait_for(lambda: not running()):
        return ""
    left = running()
    return f"{len(left)} thread(s) still running {_FREEZE_WAIT_S:g} s after SIGSTOP ({', '.join(left[:4])})" if left else ""


def _wait_for(frozen: Callable[[], bool]) -> bool:
    """Poll until the freeze has taken (True), or the freeze wait passed (False)."""
    deadline = time.monotonic() + _FREEZE_WAIT_S
    while not frozen():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.0005)
    return True


def freeze_group(pgid: int, frozen: bool) -> None:
    """Cgroup.freeze where there is no cgroup: a process group (a process that left it goes on)."""
    try:
        os.killpg(pgid, signal.SIGSTOP if frozen else signal.SIGCONT)
    except ProcessLookupError:
        return
    group = lambda: [int(s.parent.name) for s in Path("/proc").glob("[0-9]*/stat") if _field(s, 2) == str(pgid)]  # noqa: E731
    if frozen and (running := _wait_stopped(group)):
        freeze_group(pgid, False)
        raise FreezeIncomplete(running)


def _state(task: Path) -> str:
    """A thread's scheduler state (R, S, D, T...); X once it is gone."""
    return _field(task / "stat", 0) or "X"


def _field(stat: Path, n: int) -> str:
    """Field n after the command name of a /proc stat file (0: state, 2: process group); '' once it is gone."""
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[n]
    except (OSError, IndexError):
        return ""


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _kill(pid: int) -> None:
    _signal(pid, signal.SIGKILL)


def _rmdir(d: Path) -> bool:
    try:
        d.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


def for_child(processes: int, memory_mb: int) -> tuple[Cgroup | None, str]:
    """A child's cgroup and what the layer says, or None and why not."""
    where = layout()
    if where.version == 0:
        return None, where.why
    try:
        group = Cgroup.make(where, processes, memory_mb)
    except OSError as exc:
        return None, f"off: could not make the child's cgroup: {exc}"
    return group, group.said


# Processes a compile keeps busy: ninja builds main.cpp beside the extension's other sources; a .cu also runs
# cudafe++ beside cicc (build/nvcc_driver.py). On an H100 host 8 CUDA compiles at once on 16 cores left each
# 13 s (CPU-bound: ~17 CPU-s of compilers each, benchmarks/kernelbench_throughput.py).
CORES_PER_COMPILE = {"cpu": 2, "cuda": 3}


@dataclass(frozen=True)
class CompilePlan:
    slots: int  # compiles at once
    why: str  # the sentence a command says once


def compile_plan(requested: int | None, cores: int, device: str = "cuda") -> CompilePlan:
    """How many compiles may run at once: as many as asked or, unasked, one per CORES_PER_COMPILE[device] of the `cores`
    left to compiles; never more than the host's available memory holds beside the batch's own (16 asked on a
    24 GB machine would have the kernel's OOM killer end compilers: wrong `compile_error` verdicts)."""
    each = CORES_PER_COMPILE[device]
    wanted = requested or max(1, cores // each)
    said = f"--jobs {requested}" if requested else f"{_count(cores, 'core')} left for compiles, {each} per compile"
    available = _available_mb()
    if available is None:
        return CompilePlan(wanted, f"{_count(wanted, 'compile')} at a time ({said})")
    held = max(1, (available - BATCH_RESERVE_MB) // COMPILE_PEAK_MB)
    slots = min(wanted, held)
    return CompilePlan(slots, f"{_count(slots, 'compile')} at a time ({said}; memory {'only ' * (held < wanted)}"
                              f"enough for {held}: {available / 1024:.0f} GB free, {COMPILE_PEAK_MB / 1000:.1f} GB "
                              "per compile)")


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' * (n != 1)}"


_AUTOGROUP_TRIES = 10  # x 20 ms: a session's nice, where the kernel is still rate-limiting such changes


def lower_priority(nice: int) -> None:
    """This process, and all it starts, `nice` below its parent. Every child is setsid'd, and where the kernel
    schedules each session as one group (autogroup, sched(7)), a nice weighs only against the same session's
    processes: the session's own nice is what yields the CPU to another child's session. Measured on this 2-core
    VM with four CPU-bound processes in four sessions, three at nice 10: the fourth had 2.0 of 4 s of CPU with
    the nice alone, 4.0 s with the sessions' nice set too. An order for honest compiles, not a wall: a child may
    set its session's nice back (its /proc/self is its own), which costs the others CPU time, never a verdict."""
    os.nice(nice)
    if nice <= 0:
        return
    for _ in range(_AUTOGROUP_TRIES):
        try:
            fd = os.open("/proc/self/autogroup", os.O_WRONLY)
        except OSError:
            return  # no autogroups in this kernel: the nice alone orders the processes
        try:
            os.write(fd, str(min(19, nice)).encode())
            return
        except BlockingIOError:  # unprivileged, the kernel takes one change per 0.1 s on the whole machine
            time.sleep(0.02)
        except OSError:
            return
        finally:
            os.close(fd)


# Tasks (processes and threads) one child needs: at rest ~40 (the interpreter, torch's pools, CUDA's threads), and
# a build adds ninja's cores + 2 jobs of up to 5 processes each (nvcc's driver, cudafe++, cicc, ptxas, fatbinary);
# 4x margin on both. A fork bomb then takes no more than its share of a small machine's process table.
TASKS_AT_REST = 256
TASKS_PER_CORE = 32


def child_share(memory_mb: int, processes: int, children: int) -> tuple[int, int]:
    """The memory and task limits of each of `children` running at once, no larger than asked: their memory limits
    together within what the host has available (so a child meets its own limit before the kernel's OOM killer
    picks a victim for the machine), yet none below a compile's peak, which compile_plan made room for; tasks
    by the cores, which run them."""
    available = _available_mb()
    if available is not None:
        memory_mb = min(memory_mb, max(COMPILE_PEAK_MB, available // max(1, children)))
    return memory_mb, min(processes, TASKS_AT_REST + TASKS_PER_CORE * (os.cpu_count() or 1))


def _available_mb() -> int | None:
    """MemAvailable of /proc/meminfo, in MB (None where there is none)."""
    try:
        with open("/proc/meminfo") as fh:
            fields = dict(line.split(":", 1) for line in fh)
        return int(fields["MemAvailable"].split()[0]) // 1024
    except (OSError, KeyError, ValueError, IndexError):
        return None
