"""The build cache (`build_root`), which only the trusted parent writes: no child that runs candidate code can
plant a library or a precompiled header there for a later candidate.

Layout: `<root>/<key>/` a published build (the key covers source, torch, CUDA, arch and Python); `<root>/pch/<v>/`
precompiled torch headers (evaluator/build/precompiled.py); `<root>/outcomes/` how each key's compile ended (runner.py).

- Children see the cache through a private overlay (jail.py, layer `cache`) at its own path, so a build's
  absolute paths (in build.ninja) are the same in the compile child, the candidate child and any later batch:
  ninja finds it up to date. Landlock lets a child write only its own build dir there, and read pch/.
- A child's upper layer lies in its disk (evaluator/sandbox/disk.py), beside its scratch. When a compile child
  ended well the parent copies its build dir out (regular files, dirs and symlinks only, each file opened without
  following links; the child's namespace is dead by then, so nothing changes during the walk) into a temporary
  dir in the cache, owned by the parent and writable by no one else, and renames it into place under a per-key
  flock: several compile children and several kforge processes may publish the same key, the first wins, nobody
  sees half a build.
- A .gch is compiled by a jailed child of its own whose only inputs are torch's header, the compiler and the
  flags (read from the candidate's source without running it, see precompiled.variant); the parent publishes
  it the same way, under the variant's flock, before the compile child starts.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shlex
import shutil
import stat
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from evaluator.build import BUILD_TIMEOUT_S, precompiled
from evaluator.diagnose import first_error
from evaluator.sandbox.results import ChildResult, open_regular
from evaluator.build.precompiled import Variant

MAX_BUILDS_PER_COMPILE = 2
MAX_VARIANTS = 6  # .gch files kept per build root (~0.8 GB each)
MAX_ATTEMPTS = 2  # builds that were killed or timed out, per variant, before kforge stops trying
MIN_FREE_BYTES = 4 << 30  # leave room for the .gch (and the builds) on the build root's disk
_OUTCOMES = "outcomes"  # how each key's compile ended, beside the builds
_TRANSIENT = ("No space left", "Cannot allocate memory", "out of memory", "Killed", "MemoryError", "Resource temporarily")

# runs a command in the jail with its output to a log file: exit status, or None when it ran out of time
Tool = Callable[[list[str], Path], "int | None"]


# -- how a build key's compile ended ----------------------------------------------------------------------------

class CompileRecord:
    """How one build key's compile ended, kept in the build root. The key covers source, torch, CUDA, arch and
    Python, so the compile ends the same way again: a compiler error comes back at once, and a finished build
    (its library still in the build dir) needs no compile child at all. Only compiler errors are kept, never a
    timeout, a kill or a memory limit, which another attempt could pass."""

    def __init__(self, root: Path, build_dir: Path):
        memo = root / _OUTCOMES / build_dir.name
        self.build_dir, self.log = build_dir, memo.with_suffix(".failed.log")
        self.failed, self.built = memo.with_suffix(".failed.json"), memo.with_suffix(".built")

    def failure(self) -> ChildResult | None:
        return ChildResult.model_validate_json(self.failed.read_text()) if self.failed.is_file() else None

    def was_built(self) -> bool:
        return self.built.is_file() and any(self.build_dir.rglob("*.so"))

    def record_built(self) -> None:
        self.built.parent.mkdir(parents=True, exist_ok=True)
        self.built.touch()

    def record_failure(self, result: ChildResult) -> None:
        """A compile error, kept with its log unless the log names a transient cause."""
        text = result.log_tail(chars=2_000_000)
        if not any(word in text[-20_000:] for word in _TRANSIENT):
            self.failed.parent.mkdir(parents=True, exist_ok=True)
            self.log.write_bytes(text.encode())
            self.failed.write_text(result.model_copy(update={"log_path": self.log}).model_dump_json())


# -- a child's view of the cache, and publishing what a compile child built ---------------------------------------

def view_dir(workdir: Path) -> Path:
    """Where a child's overlay keeps its upper layer: beside its scratch, outside what Landlock lets it write."""
    return workdir.parent / f"{workdir.name}.view"


def view(build_root: Path, build_dir: Path, workdir: Path) -> dict:
    """The jail's `view` of the cache for one child. Its upper layer lies beside its scratch, so in its disk
    (evaluator/sandbox/disk.py): publish() reads a compile child's there, and it goes with the disk."""
    (build_root / "pch").mkdir(parents=True, exist_ok=True)
    view_dir(workdir).mkdir(parents=True, exist_ok=True)
    return {"root": str(build_root), "own": str(build_dir), "dir": str(view_dir(workdir))}


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def compiling(build_root: Path, build_dir: Path):
    """Held while a key is compiled: a second compile of the same key, from another thread of the batch (a
    twin's job) or another kforge process, waits for the first and reads how it ended instead of compiling again."""
    return _locked(build_root / _OUTCOMES / f"{build_dir.name}.compiling")


def publish(workdir: Path, build_dir: Path) -> bool:
    """Move the build a compile child made in its view into the cache; False if it made none there (the view was
    off: the child built in the cache itself, as before views existed)."""
    built = view_dir(workdir) / "upper" / build_dir.name
    if not built.is_dir() or built.is_symlink():
        return False
    root = build_dir.parent
    with _locked(root / _OUTCOMES / f"{build_dir.name}.lock"):
        for stale in root.glob(f".incoming-{build_dir.name}-*"):  # a publisher of this key killed mid-copy: we hold its lock
            shutil.rmtree(stale, ignore_errors=True)
        if not any(build_dir.rglob("*.so")):
            incoming = root / f".incoming-{build_dir.name}-{os.getpid()}-{time.monotonic_ns()}"
            try:
                _copy_tree(built, incoming)
                _replace_dir(incoming, build_dir)
            finally:
                shutil.rmtree(incoming, ignore_errors=True)
    _remove_view(workdir)
    return True


def _copy_tree(src: Path, dst: Path) -> None:
    """Dirs, regular files and symlinks (as links; whatever they name, Landlock judges the child that follows
    one); nothing else (an overlay whiteout is a device node). Owned by the parent, no write but its own."""
    dst.mkdir(mode=0o755)
    for entry in os.scandir(src):
        mode, target = entry.stat(follow_symlinks=False).st_mode, dst / entry.name
        if stat.S_ISDIR(mode):
            _copy_tree(Path(entry.path), target)
        elif stat.S_ISLNK(mode):
            os.symlink(os.readlink(entry.path), target)
        elif stat.S_ISREG(mode):
            copy_regular(Path(entry.path), target, 0o755 if mode & 0o111 else 0o644)


def copy_regular(src: Path, dst: Path, mode: int = 0o644) -> None:
    """Copy a file a child wrote, refusing anything but a regular file (a link it planted could name a secret, a
    FIFO would hold the open)."""
    with os.fdopen(open_regular(src), "rb") as fin:
        with open(os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode), "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
        st = os.fstat(fin.fileno())
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)  # ninja must find the build up to date
    os.chmod(dst, mode)  # no extended attributes: an overlay's own (trusted.overlay.*) must not reach a lower layer


def _replace_dir(new: Path, old: Path) -> None:
    """rename() replaces an empty dir atomically; a non-empty one (a partial build) is moved aside first."""
    try:
        os.rename(new, old)
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        aside = old.with_name(f".stale-{old.name}-{time.monotonic_ns()}")
        os.rename(old, aside)
        os.rename(new, old)
        shutil.rmtree(aside, ignore_errors=True)


def _remove_view(workdir: Path) -> None:
    """overlayfs leaves its work dir at mode 000, which a parent without root could not remove."""
    work = view_dir(workdir) / "work" / "work"
    if work.is_dir():
        work.chmod(0o700)
    shutil.rmtree(view_dir(workdir), ignore_errors=True)


# -- precompiled headers ------------------------------------------------------------------------------------------

def prepare_headers(source: str, root: Path, scratch: Path, tool: Tool) -> list[str]:
    """Before a compile child starts: build and publish the .gch its load_inline calls will want."""
    said = []
    for flags, with_cuda, binding in precompiled.predicted_builds(source)[:MAX_BUILDS_PER_COMPILE]:
        try:
            v = precompiled.variant(root, flags, with_cuda, binding)
            said.append(f"{list(flags)}: {build(v, scratch, tool) if v else 'not eligible'}")
        except Exception as exc:  # noqa: BLE001 - a precompiled header is an optimisation, never a failure
            said.append(f"{list(flags)}: {type(exc).__name__}: {exc}")
    return said


def _room_to_build(root: Path) -> str:
    """Why a .gch should not be built now ('' if it may)."""
    if len(list((root / "pch").glob("*/" + precompiled.HEADER + ".gch"))) >= MAX_VARIANTS:
        return f"{MAX_VARIANTS} precompiled headers already kept"
    if shutil.disk_usage(root).free < MIN_FREE_BYTES:
        return "not enough free disk space"
    return ""


def build(v: Variant, scratch: Path, tool: Tool) -> str:
    """Build and publish the variant's .gch unless it exists, failed before, or another thread or process is
    building it (a non-blocking flock: the compile goes on without). Returns what happened, for the log."""
    if v.gch.exists():
        return "present"
    if (v.directory / "failed").exists():
        return "failed before"
    if _attempts(v) >= MAX_ATTEMPTS:
        return f"gave up after {MAX_ATTEMPTS} interrupted builds"
    if not precompiled.ensure_directory(v):
        return "no directory"
    why = _room_to_build(v.directory.parent.parent)
    if why:
        return f"not built: {why}"
    with open(v.directory / "build.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return "being built by another process"
            raise
        return "present" if v.gch.exists() else _compile(v, scratch, tool)


def _attempts(v: Variant) -> int:
    try:
        return int((v.directory / "attempts").read_text() or 0)
    except (OSError, ValueError):
        return 0


def _count_attempt(v: Variant) -> None:
    n = _attempts(v) + 1
    precompiled.replace_atomically(v.directory / "attempts", lambda tmp: tmp.write_text(str(n)))


def _compile(v: Variant, scratch: Path, tool: Tool) -> str:
    scratch.mkdir(parents=True, exist_ok=True)
    out, log = scratch / "extension.h.gch", scratch / "build.log"
    # -Wno-error: the header as main file draws "#pragma once in main file"; warnings do not change the .gch.
    cmd = [*v.cxx, *v.flags, "-Wno-error", "-x", "c++-header", str(v.header), "-o", str(out)]
    log.write_text(shlex.join(cmd) + "\n")
    start = time.perf_counter()
    code = tool(cmd, log)
    precompiled.replace_atomically(v.directory / "build.log", lambda tmp: copy_regular(log, tmp))
    if code is None:
        _count_attempt(v)
        return f"build timed out after {BUILD_TIMEOUT_S:.0f} s"
    if code == 0 and out.is_file():
        precompiled.replace_atomically(v.gch, lambda tmp: copy_regular(out, tmp))
        return f"built in {time.perf_counter() - start:.1f} s"
    text = (v.directory / "build.log").read_text(errors="replace")
    if code > 0 and "internal compiler error" not in text and "terminated program" not in text:
        shutil.copyfile(v.directory / "build.log", v.directory / "failed")  # these flags: do not retry each time
    else:
        _count_attempt(v)
    return f"build failed (exit {code}): {first_error(text)}"
