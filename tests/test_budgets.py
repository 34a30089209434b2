"""The parent's budgets of a child, against real hostile candidates run through the evaluator: a compile child in
which no compiler works (a hang at import that started processes, one of them a compiler blocked on its input) is
a `timeout` well within a minute with nothing of it left; one that writes many files, each under the per-file
limit, is stopped at its disk quota, and its scratch is gone when its verdict arrives, not when the batch ends.
Each child's memory and task limits are shared out of the machine."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest

from evaluator import CandidateJob, EvalSettings, Status, evaluate
from evaluator.sandbox import cgroups
from evaluator.contracts import Limits
from evaluator.sandbox.budgets import COMPILER_IDLE_S, DISK_QUOTA_MB
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


def _disk_bytes(root: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in root.rglob("*") if p.is_file() and not p.is_symlink())


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


@pytest.mark.slow
def test_many_files_each_under_the_file_limit_are_stopped_at_the_disk_quota_and_freed_with_the_child(
        settings, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "scratch"))  # where the batch's scratch is made
    (tmp_path / "scratch").mkdir()
    verdicts = evaluate([_job("fill_disk_many")], settings)
    v = next(verdicts)
    (batch_root,) = (tmp_path / "scratch").glob("kforge-eval-*")  # the batch still runs: its scratch is there
    held = _disk_bytes(batch_root)
    assert list(verdicts) == []
    assert v.status is Status.RUNTIME_ERROR, v.evidence
    assert v.evidence.cause.startswith(f"over its disk quota ({DISK_QUOTA_MB:,} MB"), v.evidence.cause
    written_mb = int(re.search(r": ([\d,]+) MB in", v.evidence.cause).group(1).replace(",", ""))
    assert DISK_QUOTA_MB < written_mb < 16 * 256, v.evidence.cause  # stopped before its 16 files of 256 MiB
    assert held < 2**20, held  # its 2 GiB and more were freed when its child ended


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
