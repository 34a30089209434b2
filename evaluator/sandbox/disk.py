"""A candidate's disk: one tmpfs of the disk quota (budgets.DISK_QUOTA_MB bytes, SCRATCH_ENTRIES files and dirs)
that holds everything its children may write: their scratch (so their HOME and TMPDIR), their layers of the build
cache, their logs. The kernel refuses a write past it (ENOSPC) before the bytes land, wherever the batch's scratch
lies (on disk, or in /dev/shm with TMPDIR=/dev/shm), and files held open after they were deleted count too.

kforge mounts it in its own mount namespace, where it reads those files itself (a compile child's build, published
after it ended; the logs), and where the comparer, which stays in kforge's namespaces (Batch.jail), reads the
outputs a CPU candidate hands over while it runs, from disks mounted after the comparer started. So kforge must be
root there (CAP_SYS_ADMIN): elsewhere no disk is mounted, the jail's `disk` layer says why (strict mode refuses),
and only the sampled watch (budgets.Watch) holds a child's files.

Its pages are memory, charged to the memory cgroup of the child that writes them: a child meets whichever comes
first of its disk quota and its memory limit (which counts its disk beside its processes), and what a child leaves
in the disk after it ended (a compile child's log; its build until published) stays in memory, no longer under a
live child's limit, until the parent releases the disk with the candidate's verdict.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
from pathlib import Path

from evaluator.sandbox.budgets import DISK_QUOTA_MB, SCRATCH_ENTRIES

_MS_NOSUID, _MS_NODEV, _MNT_DETACH = 2, 4, 2
_SIZE = f"size={DISK_QUOTA_MB}m,nr_inodes={SCRATCH_ENTRIES},mode=0711"  # 0711: a child uid reaches its own dir


def mount(path: Path) -> dict:
    """A disk mounted on the (new, empty) dir `path`: the jail spec's `disk`, with its size and what the disk layer
    says."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"tmpfs", os.fsencode(path), b"tmpfs", _MS_NOSUID | _MS_NODEV, _SIZE.encode()) != 0:
        why = os.strerror(ctypes.get_errno()) + ("; kforge is not root" if os.geteuid() != 0 else "")
        return {"said": f"off: kforge could not mount a child's disk ({why}): only its sampled watch holds its files"}
    return {"dir": str(path), "bytes": DISK_QUOTA_MB << 20, "entries": SCRATCH_ENTRIES,
            "said": f"on (a tmpfs of {DISK_QUOTA_MB:,} MB and {SCRATCH_ENTRIES:,} files and dirs holds all it writes)"}


def release(path: Path) -> None:
    """`path` gone with every disk at or below it: their files removed first, which frees their pages at once (a
    child that started while a disk was mounted holds a copy of the mount in its own namespace until it ends),
    then each detached, then the dirs removed."""
    remove(path)  # through the mounts; a mountpoint itself stays (EBUSY)
    libc = ctypes.CDLL(None, use_errno=True)
    for point in sorted(_mounts(path), key=len, reverse=True):
        libc.umount2(os.fsencode(point), _MNT_DETACH)
    remove(path)


def sweep(parent: Path) -> None:
    """Release the disks below roots in `parent` named for a kforge process (kforge-eval-PID-..., kforge-profile-
    PID-...) that is gone (SIGKILL: no cleanup ran): they would hold their files in memory until the machine
    restarts."""
    for point in _mounts(parent):
        found = re.match(r"kforge-[a-z]+-(\d+)-[^/]+", os.path.relpath(point, os.path.realpath(parent)))
        if found and not Path(f"/proc/{found[1]}").exists():
            release(Path(point))


def _mounts(path: Path) -> list[str]:
    """The mount points at or below `path` in this mount namespace."""
    top = os.path.realpath(path)
    unescape = lambda s: re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), s)  # noqa: E731 - mountinfo's \040
    points = [unescape(line.split()[4]) for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [p for p in points if p == top or p.startswith(top + "/")]


def remove(path: Path) -> None:
    """rmtree, also of dirs left at mode 000 (overlayfs's work dir, or a child's own), which a parent without root
    could not list; a file is unlinked. The child's processes are gone: nothing swaps a dir for a link meanwhile."""
    for top, dirs, _ in os.walk(path):
        for name in dirs:
            if not os.path.islink(os.path.join(top, name)):
                with contextlib.suppress(OSError):
                    os.chmod(os.path.join(top, name), 0o700)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
