"""The parent's budgets of a child, against real hostile candidates run through the evaluator: a compile child in
which no compiler works (a hang at import that started processes, one of them a compiler blocked on its input) is
a `timeout` well within a minute with nothing of it left; one that writes past its disk quota (many files each
under the per-file limit, deleted files held open, or files without bytes) gets ENOSPC at the quota from the kernel,
with the batch's scratch on disk or in /dev/shm, and no read from outside every few ms sees it hold more; its files
are gone when its verdict arrives, not when the batch ends. Where no disk can be mounted, strict mode refuses and
`warn` holds the quota by reading from outside. Each child's memory and task limits are shared out of the machine."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from pathlib import Path

import pytest

from evaluator import CandidateJob, EvalSettings, Status, evaluate
from evaluator.sandbox import cgroups, disk
from evaluator.contracts import EvaluatorError, Limits
from evaluator.sandbox.budgets import COMPILER_IDLE_S, DISK_QUOTA_MB, SCRATCH_ENTRIES
from reference_problems import resolve_problem
from tests.conftest import ROOT, running

RELU = ROOT / "tests" / "adversarial" / "relu"
HANG_MARKER = "kforge_adversarial_import_hang"


@pytest.fixture
def settings(tmp_path: Path) -> EvalSettings:
    """A time limit of 150 s: without the idle budget the hang would end there, as `no result after 150 s`."""
    return EvalSettings(device="cpu", size="small", trials=2, warmup_ms=5, rep_ms=20, leak_calls=2, jobs=2,
                        build_root=tmp_path / "builds", limits=Limits(timeout_s=150))


def _job(name: str) -> CandidateJob:
    return CandidateJob(path=RELU / f"{name}.py", problem=resolve_problem("relu"))


@pytest.mark.slow
def test_a_hang_at_import_with_spawned_processes_is_a_timeout_within_a_minute_and_leaves_nothing(settings):
    seen, done = [], threading.Event()

    def watch() -> None:  # the processes it started, while it hangs: the check below must have something to find
        while not done.wait(0.5):
            seen.append(len(running(HANG_MARKER)))

    watcher = threading.Thread(target=watch)
    watcher.start()
    started = time.monotonic()
    try:
        (v,) = evaluate([_job("import_hang_spawn")], settings)
    finally:
        took = time.monotonic() - started
        done.set()
        watcher.join()
    assert v.status is Status.TIMEOUT, v.evidence
    assert v.evidence.cause == f"no compiler ran for {COMPILER_IDLE_S:.0f} s (stage: compile)", v.evidence.cause
    assert COMPILER_IDLE_S < took < 60, took
    assert max(seen) >= 5, seen  # 3 shell loops, g++ and its cc1plus
    assert running(HANG_MARKER) == []


class Outside(threading.Thread):
    """What a candidate's children hold, read from outside every 2 ms: the bytes of every file in the candidate's
    dirs of the batches under `parent` (on whatever file system: a disk or not) and of the deleted files held open
    by processes working there, each counted once; and how much more /dev/shm itself holds than before."""

    def __init__(self, parent: Path):
        super().__init__(daemon=True)
        self.parent, self.done, self.shm_before = parent, threading.Event(), _used("/dev/shm")
        self.held = self.shm = self.reads = 0

    def run(self) -> None:
        while not self.done.wait(0.002):
            self.held = max(self.held, _held(self.parent))
            self.shm = max(self.shm, _used("/dev/shm") - self.shm_before)
            self.reads += 1


def _used(path: str) -> int:
    fs = os.statvfs(path)
    return (fs.f_blocks - fs.f_bfree) * fs.f_frsize


def _held(parent: Path) -> int:
    seen: dict[tuple[int, int], int] = {}
    candidates = list(parent.glob("kforge-eval-*/cand*"))
    for top, _, files in (walked for own in candidates for walked in os.walk(own)):
        for name in files:
            with contextlib.suppress(OSError):  # gone meanwhile
                st = os.lstat(os.path.join(top, name))
                seen[st.st_dev, st.st_ino] = st.st_blocks * 512 if stat.S_ISREG(st.st_mode) else 0
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if proc.name.isdigit() and any(Path(os.readlink(proc / "cwd")).is_relative_to(own) for own in candidates):
                for fd in (proc / "fd").iterdir():
                    with contextlib.suppress(OSError):
                        st = fd.stat()
                        if st.st_nlink == 0 and stat.S_ISREG(st.st_mode):
                            seen[st.st_dev, st.st_ino] = st.st_blocks * 512
    return sum(seen.values())


@pytest.fixture(params=["disk", "tmpfs"])
def scratch(request, tmp_path, monkeypatch) -> Path:
    """Where the batch's scratch is made: on the machine's disk (under tmp_path), or in /dev/shm as TMPDIR=/dev/shm
    puts it."""
    on_disk = request.param == "disk"
    parent = tmp_path / "scratch" if on_disk else Path(tempfile.mkdtemp(prefix="kforge-test-", dir="/dev/shm"))
    parent.mkdir(exist_ok=True)
    monkeypatch.setattr(tempfile, "tempdir", str(parent))
    yield parent
    shutil.rmtree(parent, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fill_disk_many", "fill_disk_unlinked"])
def test_writes_past_the_disk_quota_fail_at_the_quota_and_no_moment_holds_more(settings, scratch, name):
    """16 files of 256 MiB written at import (the compile child), or deleted as soon as made and held open in
    forward (the candidate child): the write past the quota fails with ENOSPC, the candidate having written the
    quota less its children's own few files (their logs' first MiB is kept for them), and its files go with the
    verdict. The verdict names the quota where the disk is still full when the parent reads it; files held open
    are freed as the child dies, which may be before: then its own error says ENOSPC."""
    outside = Outside(scratch)
    outside.start()
    started = time.monotonic()
    try:
        verdicts = evaluate([_job(name)], settings)
        v = next(verdicts)
        assert len(list(scratch.glob("kforge-eval-*"))) == 1  # the batch still runs: its scratch is there
        held = _held(scratch)
        assert list(verdicts) == []
    finally:
        outside.done.set()
        outside.join()
    took = time.monotonic() - started
    print(f"{name} in {scratch}: {outside.reads} reads in {took:.1f} s, at most {outside.held / 2**20:,.1f} MiB held, "
          f"/dev/shm at most {outside.shm / 2**20:+,.1f} MiB; {v.evidence.cause}")
    quota = DISK_QUOTA_MB << 20
    assert v.status is Status.RUNTIME_ERROR, v.evidence
    written = int(re.search(r"No space left on device after (\d+) bytes", v.evidence.log_tail)[1])
    assert quota - (4 << 20) <= written <= quota, written
    at_quota = v.evidence.cause.startswith(f"at its disk quota ({DISK_QUOTA_MB:,} MB")
    assert at_quota or name == "fill_disk_unlinked" and "[Errno 28] No space left" in v.evidence.cause, v.evidence.cause
    assert 0.99 * quota < outside.held <= quota, outside.held  # it got there, and never past it
    assert outside.shm < 64 << 20, outside.shm  # nothing of it reached /dev/shm itself
    assert outside.reads > took / 0.02, outside.reads  # a read every few ms
    assert held < 2**20, held  # its 2 GiB were freed with its verdict


@pytest.mark.slow
def test_files_past_the_entry_quota_fail_at_the_quota(settings, tmp_path, monkeypatch):
    """Empty files hold no bytes, only entries: the one past SCRATCH_ENTRIES fails with ENOSPC."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (v,) = evaluate([_job("fill_disk_entries")], settings)
    assert v.status is Status.RUNTIME_ERROR, v.evidence
    made = int(re.search(r"No space left on device after (\d+) files", v.evidence.log_tail)[1])
    assert SCRATCH_ENTRIES - 20 <= made < SCRATCH_ENTRIES, made  # less its children's own few files and dirs
    assert v.evidence.cause.startswith(f"at its disk quota ({DISK_QUOTA_MB:,} MB, {SCRATCH_ENTRIES:,} files)"), \
        v.evidence.cause


@pytest.mark.slow
def test_without_a_disk_strict_mode_refuses_and_warn_holds_the_quota_from_outside(settings, tmp_path, monkeypatch):
    """Where kforge cannot mount a child's disk (not root), the layer is missing: strict mode refuses the batch,
    and `warn` stops the child past the quota at the parent's next read (its 16 files of 256 MiB land first)."""
    monkeypatch.setattr(disk, "mount", lambda path: {"said": "off: refused by this test"})
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "scratch"))
    (tmp_path / "scratch").mkdir()
    with pytest.raises(EvaluatorError, match="disk off: refused by this test"):
        list(evaluate([_job("fill_disk_many")], settings))
    verdicts = evaluate([_job("fill_disk_many")], settings.model_copy(update={"sandbox": "warn"}))
    v = next(verdicts)
    held = _held(tmp_path / "scratch")
    assert list(verdicts) == []
    assert v.status is Status.RUNTIME_ERROR, v.evidence
    assert v.evidence.cause.startswith(f"over its disk quota ({DISK_QUOTA_MB:,} MB"), v.evidence.cause
    written_mb = int(re.search(r": ([\d,]+) MB in", v.evidence.cause).group(1).replace(",", ""))
    assert DISK_QUOTA_MB < written_mb < 16 * 256, v.evidence.cause  # stopped before its 16 files of 256 MiB
    assert held < 2**20, held  # its 2 GiB and more were freed when its verdict came


def test_each_childs_memory_and_tasks_are_its_share_of_the_machine(monkeypatch):
    tasks = min(4096, cgroups.TASKS_AT_REST + cgroups.TASKS_PER_CORE * (os.cpu_count() or 1))
    monkeypatch.setattr(cgroups, "_available_mb", lambda: 24_000)  # the CPU machines: 24 GB
    assert cgroups.child_share(16_384, 4_096, children=5) == (4_800, tasks)
    assert cgroups.child_share(16_384, 4_096, children=16) == (cgroups.COMPILE_PEAK_MB, tasks)
    assert cgroups.child_share(3_072, 128, children=5) == (3_072, 128)  # never more than asked
    monkeypatch.setattr(cgroups, "_available_mb", lambda: 2_000_000)  # a GPU host
    assert cgroups.child_share(16_384, 4_096, children=40)[0] == 16_384


def test_a_batch_gives_its_children_their_share(monkeypatch, tmp_path):
    monkeypatch.setattr(cgroups, "_available_mb", lambda: 24_000)
    from evaluator.parent.batch import Batch

    batch = Batch(EvalSettings(device="cpu", jobs=2, build_root=tmp_path, sandbox="warn"), per_device=3)
    shutil.rmtree(batch.root)
    assert batch.settings.limits.memory_mb == 24_000 // (batch.compile_slots + 3)
    assert batch.settings.limits.timeout_s == Limits().timeout_s
