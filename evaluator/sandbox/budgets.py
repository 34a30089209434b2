"""The parent's own budgets of one child, read from outside it about once a second: its disk (all its files
together, not only each file as RLIMIT_FSIZE caps them) and, in a compile child, whether a compiler still runs
(a hang or a sleep at import holds a compile slot, and spawned processes keep it busy, until the whole limit).

A child with a disk of its own (evaluator/sandbox/disk.py: every child that runs candidate code, where kforge is
root) is held to its quota by the kernel; the watch only names a disk the kernel filled (its next write failed),
and stops the child there. Elsewhere (the trusted reference and introspect children, or where no disk can be
mounted) the watch is the quota: it walks the child's files, and bytes written between two reads land first."""

from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path
from typing import Callable

from evaluator.contracts import Status
from evaluator.sandbox.results import Budget, ChildResult

# A compile child in which no compiler used any CPU this long is stopped (`timeout`): an honest one goes without
# only while Python runs between builds (its candidate's import, torch writing the ninja file, loading the
# library: seconds), while a hang or a sleep at import held its compile slot for the whole 900 s limit.
COMPILER_IDLE_S = 45.0
# What a candidate's children may keep, all their files together (their scratch, their views of the cache, files
# held open after unlinking them): a build with its compiler's temporaries (tens of MB), and on CPU one call's
# outputs handed over as a file (relu at full size: 1 GiB, the largest here). Also the largest single file
# (RLIMIT_FSIZE): without a total, 16 files of 256 MiB, each under the per-file limit, held 4 GiB until the batch ended.
DISK_QUOTA_MB = 2_048
SCRATCH_ENTRIES = 10_000  # files and dirs: a build makes tens, torch.compile's cache in TMPDIR hundreds
_WATCH_S = 1.0  # how often the parent reads a child's disk and compilers: each read walks its scratch
# toolchain programs, by the file a process runs (x86_64-linux-gnu-g++-12, ld.bfd, cc1plus, cicc...)
_TOOLCHAIN = re.compile(r"(?:[\w.-]+-)?(cc1|cc1plus|collect2|lto1|lto-wrapper|ld(?:\.\w+)?|as|gcc|g\+\+|c\+\+|cc"
                        r"|clang|clang\+\+|ninja|nvcc|cicc|ptxas|cudafe\+\+|fatbinary|nvlink|nvprune)(?:-[\d.]+)?")


def _compiler_ticks(pid: int, writable: tuple[str, ...]) -> int | None:
    """The CPU ticks a toolchain program has used, or None if the process runs none: judged by the file it runs,
    which a candidate cannot rename as it can its process (prctl), and which must not lie where the child writes."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    if exe.startswith(writable) or not _TOOLCHAIN.fullmatch(os.path.basename(exe)):
        return None
    return int(fields[11]) + int(fields[12])  # utime + stime


def _disk_use(dirs: list[Path], pids: list[int]) -> tuple[int, int]:
    """Bytes on disk and entries of the files under `dirs` (links not followed) and of the files the processes
    hold open after unlinking them, each file counted once; only on the dirs' file systems (a memfd is memory,
    which the cgroup counts). The walk stops past SCRATCH_ENTRIES: its cost is bounded whatever the child made."""
    seen: dict[tuple[int, int], int] = {}
    devices = {d.stat().st_dev for d in dirs if d.exists()}
    for fd in (entry for pid in pids for entry in _scan(f"/proc/{pid}/fd")):
        with contextlib.suppress(OSError):
            st = os.stat(fd.path)
            if st.st_nlink == 0 and st.st_dev in devices:
                seen[st.st_dev, st.st_ino] = st.st_blocks * 512
    stack = [str(d) for d in dirs]
    while stack and len(seen) <= SCRATCH_ENTRIES:
        for entry in _scan(stack.pop()):
            with contextlib.suppress(OSError):  # gone meanwhile
                st = entry.stat(follow_symlinks=False)
                seen[st.st_dev, st.st_ino] = st.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    return sum(seen.values()), len(seen)


def _scan(path: str) -> list[os.DirEntry]:
    try:
        with os.scandir(path) as entries:
            return list(entries)
    except OSError:
        return []


def _filled(disk: str, stage: str) -> Budget | None:
    """A disk the kernel filled: no block or no entry left, so its next write failed (ENOSPC)."""
    try:
        fs = os.statvfs(disk)
    except OSError:  # released with its candidate's verdict
        return None
    if fs.f_bavail and fs.f_favail:
        return None
    used, entries = (fs.f_blocks - fs.f_bfree) * fs.f_frsize, fs.f_files - fs.f_ffree
    return Budget(status=Status.RUNTIME_ERROR, cause=f"at its disk quota ({DISK_QUOTA_MB:,} MB, {SCRATCH_ENTRIES:,} "
                  f"files), where its tmpfs refused more (ENOSPC): {used / 2**20:,.0f} MB in {entries:,} files and "
                  f"dirs (stage: {stage})")


class Watch:
    """The parent's own budgets of one child, read from outside every _WATCH_S: its disk (DISK_QUOTA_MB,
    SCRATCH_ENTRIES) and, in a compile child (`idle_s`), whether a compiler still runs. `writes`: the dirs it
    writes; `exes`: where a program it runs is its own, not the system's; `disk`: its own disk, if it has one."""

    def __init__(self, pids: Callable[[], list[int]], writes: list[Path], exes: list[Path], idle_s: float | None,
                 disk: str | None = None):
        self.pids, self.writes, self.idle_s, self.disk = pids, writes, idle_s, disk
        self.exes = tuple(f"{p}/" for p in exes)
        self.ticks: dict[int, int] = {}
        self.compiled = 0.0  # time.monotonic() when a compiler was last seen working
        self.next = 0.0

    @classmethod
    def of(cls, jail: dict, pids: Callable[[], list[int]], idle_s: float | None) -> Watch:
        """The watch of what the jail lets a child write: its disk, or its scratch and the upper layer of its view
        of the cache (its own build dir there is the cache's, seen through that view)."""
        view = jail.get("view") or {}
        writes = [Path(p) for p in [*jail["write"], *filter(None, [view.get("dir")])]]
        disk = (jail.get("disk") or {}).get("dir")
        return cls(pids, writes, [*writes, *filter(None, [view.get("own")])], idle_s, disk)

    def at_end(self, stage: str) -> Budget | None:
        """Once the child ended: whether it left its disk at the quota (or its files over it), which the reads while
        it ran may have missed: a child can fill its disk and die of ENOSPC between two of them."""
        return self._disk([], stage)

    def over(self, result: ChildResult) -> Budget | None:
        """A disk is read at every call (one statvfs: a child that filled it may free it again as it dies), its
        files and compilers every _WATCH_S (each read walks them)."""
        now = time.monotonic()
        if self.disk and (filled := _filled(self.disk, result.stage)):
            return filled
        if now < self.next:
            return None
        self.next = now + _WATCH_S
        pids = self.pids()
        walked = None if self.disk else self._disk(pids, result.stage)  # a disk was read above
        return walked or self._idle(pids, result.started, now, result.stage)

    def _disk(self, pids: list[int], stage: str) -> Budget | None:
        if self.disk:
            return _filled(self.disk, stage)
        used, entries = _disk_use(self.writes, pids)
        if used > DISK_QUOTA_MB * 2**20 or entries > SCRATCH_ENTRIES:
            return Budget(status=Status.RUNTIME_ERROR, cause=f"over its disk quota ({DISK_QUOTA_MB:,} MB, {SCRATCH_ENTRIES:,} "
                          f"files): {used / 2**20:,.0f} MB in {entries:,} files and dirs (stage: {stage})")
        return None

    def _idle(self, pids: list[int], started: float, now: float, stage: str) -> Budget | None:
        """A compiler that used CPU since the last read (or newly started) keeps the compile child going; the
        clock starts with its request."""
        if self.idle_s is None or not started:
            return None
        ticks = {pid: t for pid in pids if (t := _compiler_ticks(pid, self.exes)) is not None}
        if any(t > self.ticks.get(pid, -1) for pid, t in ticks.items()):
            self.compiled = now
        self.ticks = ticks
        if now - max(self.compiled, started) > self.idle_s:
            return Budget(status=Status.TIMEOUT, cause=f"no compiler ran for {self.idle_s:.0f} s (stage: {stage})")
        return None
