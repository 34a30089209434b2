"""Device leases shared by every kforge process of a machine: while a child runs on a device (a GPU, or the CPU
on CPU runs) that device is held through an flock, so two submitters never time or leak-check on it at once.

The holder writes who it is (pid, command line, since when) into the lock file; a process that finds the device
held writes a ticket (`DEVICE.line/PID.json`) and takes the device only once no live ticket older than its own is
left, so processes take turns in the order they came instead of racing each poll. Tickets and holder records of
dead processes are ignored. A wait is said once, through this module's logger (the caller decides where it
shows), with the device, its holder (or, between two holds, who takes it next), the waiter's place in line and an
estimate of the wait from how long the device's last holds lasted (`DEVICE.line/holds`, written by each holder as
it gives the device back); `snapshot` lists every device for `status`."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import logging
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import fmean

LOCK_DIR = Path("/tmp/kforge-device-locks")  # one place for every kforge process of the machine, whatever its TMPDIR
_LINE = ".line"
_HOLDS, _KEPT, _WIDTH = "holds", 20, 12  # in DEVICE.line/: the seconds of its last _KEPT holds, fixed-width lines
_HELD: dict[int, tuple[str, float]] = {}  # this process's flock'd descriptors: their device, since when
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Party:
    """A process holding or waiting for a device, as other kforge processes are told about it."""
    pid: int
    command: str
    since: float  # epoch seconds

    @classmethod
    def me(cls) -> "Party":
        """This process, named by its command line (`python -m kforge ...` as `kforge ...`)."""
        program = Path(sys.argv[0])
        name = program.parent.name if program.name == "__main__.py" else program.name
        return cls(os.getpid(), " ".join([name, *sys.argv[1:]])[:300], time.time())

    @classmethod
    def read(cls, path: Path) -> "Party | None":
        """The record in `path` if its process still lives (a killed holder or waiter leaves its record behind)."""
        try:
            party = cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None
        return party if _alive(party.pid) else None

    def describe(self) -> str:
        return f"pid {self.pid} ({self.command}) since {time.strftime('%H:%M:%S', time.localtime(self.since))}"


@dataclass(frozen=True)
class Device:
    """One device's state: who holds it, who waits (first in line first) and how long its last holds lasted."""
    name: str
    holder: Party | None
    queue: list[Party]
    holds: list[float] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"device": self.name, "holder": self.holder and asdict(self.holder),
                "queue": [{**asdict(party), "estimate_s": self.wait_s(place)} for place, party in enumerate(self.queue, 1)],
                "holds_s": self.holds}

    def holding(self, behind: Party | None = None) -> str:
        """Who has the device: its holder, or between two holds the first in line (ahead of `behind`)."""
        if self.holder is not None:
            return f"held by {self.holder.describe()}"
        ahead = [party for party in self.queue if behind is None or (party.since, party.pid) < (behind.since, behind.pid)]
        return f"between holds, next: {ahead[0].describe()}" if ahead else "held by a process taking it now"

    def wait_s(self, place: int) -> float | None:
        """Seconds until place `place` in line has it: what the holder has left of a mean hold, then a mean hold
        for each one ahead; None before any hold of it has ended."""
        if not self.holds:
            return None
        mean = fmean(self.holds)
        left = max(mean - (time.time() - self.holder.since), 0.0) if self.holder else 0.0
        return left + mean * (place - 1)

    def estimate(self, place: int) -> str:
        wait = self.wait_s(place)
        if wait is None:
            return "no estimate yet (no hold of this device has ended)"
        return (f"about {_duration(wait)} to wait (its last {len(self.holds)} holds took "
                f"{_duration(fmean(self.holds))} on average)")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _shared_dir(path: Path) -> Path:
    """A folder every user of the machine can add to (sticky, like /tmp), whatever this process's umask."""
    path.mkdir(exist_ok=True)
    with contextlib.suppress(PermissionError):
        path.chmod(0o1777)
    return path


@functools.cache
def identity(device: str | None) -> str:
    """The physical device: a GPU's UUID (ids depend on each process's CUDA_VISIBLE_DEVICES), or the CPU."""
    if device is None:
        return "cpu"
    import torch

    from evaluator.hardware import visible_gpus

    try:
        return f"cuda-{torch.cuda.get_device_properties(visible_gpus().index(device)).uuid}"
    except (ValueError, RuntimeError, AttributeError, AssertionError):
        return f"cuda-{device}"


def _queue(name: str) -> list[Party]:
    line = LOCK_DIR / (name + _LINE)
    tickets = [Party.read(path) for path in line.glob("*.json")] if line.is_dir() else []
    return sorted((t for t in tickets if t is not None), key=lambda t: (t.since, t.pid))


def snapshot() -> list[Device]:
    """Every device a kforge process of this machine has used: its live holder and its live queue."""
    if not LOCK_DIR.is_dir():
        return []
    names = sorted(p.name for p in LOCK_DIR.iterdir() if p.is_file())
    return [_device(name) for name in names]


def _device(name: str) -> Device:
    return Device(name, Party.read(LOCK_DIR / name), _queue(name), _holds(name))


def _holds(name: str) -> list[float]:
    try:
        lines = (LOCK_DIR / (name + _LINE) / _HOLDS).read_text().split()
    except OSError:
        return []
    return [float(line) for line in lines if line.replace(".", "", 1).isdigit()]


def _note_hold(name: str, seconds: float) -> None:
    """One more hold of the device, the oldest of _KEPT dropped: rewritten in place by the holder alone (it holds
    the flock), every line as wide as the others, so a reader never meets half a number."""
    fd = os.open(_shared_dir(LOCK_DIR / (name + _LINE)) / _HOLDS, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        with contextlib.suppress(PermissionError):
            os.fchmod(fd, 0o666)  # the next user's kforge writes it too
        kept = [*_holds(name)[1 - _KEPT:], seconds]
        os.pwrite(fd, "".join(f"{s:{_WIDTH - 1}.1f}\n" for s in kept).encode(), 0)
    finally:
        os.close(fd)


class Lease:
    """This process's lease of one device: `take` returns an flock'd descriptor or None (then this process is in
    line, and said so once); `waited_s` is how long the last successful take waited for other processes."""

    def __init__(self, device: str | None):
        self.name = identity(device)
        self.ticket: Party | None = None
        self.waited_s = 0.0

    @property
    def _ticket_path(self) -> Path:
        return LOCK_DIR / (self.name + _LINE) / f"{os.getpid()}.json"

    def take(self) -> int | None:
        _shared_dir(LOCK_DIR)
        ahead = [t for t in _queue(self.name) if t.pid != os.getpid()
                 and (self.ticket is None or (t.since, t.pid) < (self.ticket.since, self.ticket.pid))]
        fd = None if ahead else _flock(LOCK_DIR / self.name)
        if fd is None:
            self._wait()
            return None
        os.ftruncate(fd, 0)
        holder = Party.me()
        os.pwrite(fd, json.dumps(asdict(holder)).encode(), 0)
        _HELD[fd] = (self.name, holder.since)
        self.waited_s = time.time() - self.ticket.since if self.ticket else 0.0
        self.leave()
        return fd

    def _wait(self) -> None:
        """Join the line (once per wait) and say for what, behind whom, at which place."""
        if self.ticket is not None:
            return
        self.ticket = Party.me()
        _shared_dir(self._ticket_path.parent)
        self._ticket_path.write_text(json.dumps(asdict(self.ticket)))
        device = _device(self.name)
        place = 1 + sum(t.pid != os.getpid() for t in device.queue
                        if (t.since, t.pid) < (self.ticket.since, self.ticket.pid))
        log.info("waiting for device %s, %s; place %d in line, %s", self.name, device.holding(self.ticket), place,
                 device.estimate(place))

    def leave(self) -> None:
        """Out of the line (taken, or given up)."""
        if self.ticket is not None:
            self._ticket_path.unlink(missing_ok=True)
            self.ticket = None

    @staticmethod
    def give_back(fd: int) -> None:
        """Note how long this hold lasted (waiters' estimates), forget the holder record, then drop the flock
        (closing the descriptor drops it)."""
        if (held := _HELD.pop(fd, None)) is not None:
            with contextlib.suppress(OSError):
                _note_hold(held[0], time.time() - held[1])
        os.ftruncate(fd, 0)
        os.close(fd)


def _flock(path: Path) -> int | None:
    """An exclusive flock on `path`, or None if another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    with contextlib.suppress(PermissionError):
        os.fchmod(fd, 0o666)  # the next user's kforge opens it read-write too
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd
