"""kforge under stress, with real `python -m kforge` processes on a real SQLite file (and PostgreSQL where the
`url` fixture offers it): concurrent submits, SIGKILL mid-compile and a resumed re-run, Ctrl-C, and a batch of
500. Truncated and syntax-error candidates are judged statically (stored without a compile), so only the crash
test pays for a real C++ build (the Ctrl-C test interrupts one early)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import COMPILED_RELU
from db import Database, EvaluationRow

REPO = Path(__file__).resolve().parents[1]



# Hangs in forward (in the candidate child), after leaving a mark in its TMPDIR, which is its work dir.
SLEEPER = """import os
import time
from pathlib import Path

import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        Path(os.environ["TMPDIR"], "hanging").touch()
        time.sleep(600)
        return torch.relu(x)
"""
# Where Ctrl-C lands: the real compile (a worker thread waits on it) or a hanging candidate run (the main thread
# does), each with the file (under tmp_path) that shows it has got there.
# torch's build lock, in the compile child's own layer of the cache (evaluator/parent/buildcache.py), under tmp_path
COMPILING = "tmp/kforge-eval-*/*/compile.view/upper/*/*/lock"
PHASES = {"compile": (COMPILED_RELU, COMPILING), "run": (SLEEPER, "tmp/kforge-eval-*/**/hanging")}


def static_candidate(i: int) -> str:
    """Distinct by i; even ones are cut off mid-file (truncated), odd ones are syntax errors."""
    if i % 2:
        return f"import torch\n\n\nclass ModelNew(torch.nn.Module):\n    scale = {i} +\n"
    return f"import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x * {i}"


def write_candidates(directory: Path, n_static: int, extra: dict[str, str] | None = None) -> Path:
    directory.mkdir(parents=True)
    for i in range(n_static):
        (directory / f"static_{i:04d}.py").write_text(static_candidate(i))
    for name, source in (extra or {}).items():
        (directory / f"{name}.py").write_text(source)
    return directory


def evaluator_children(tmpdir: Path) -> list[int]:
    """Live `python -m evaluator.child.main` processes working under tmpdir (a deleted cwd still counts; other runs
    on this machine do not)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and b"evaluator.child.main" in (proc / "cmdline").read_bytes():
                if Path(os.readlink(proc / "cwd")).is_relative_to(tmpdir):
                    found.append(int(proc.name))
        except OSError:
            continue  # gone meanwhile
    return found


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _as_terminal_job() -> None:
    """A shell's foreground job takes SIGINT; a test run started in the background (`cmd &`) would pass it on
    ignored, and Python keeps an ignored SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Kforge:
    """Runs the CLI as a user would, each process in its own session (as a shell job), with a private TMPDIR
    and build cache; stop() kills whatever a test left running."""

    def __init__(self, tmp_path: Path):
        self.tmpdir = tmp_path / "tmp"
        self.tmpdir.mkdir()
        self.build_root = tmp_path / "builds"
        self.url = f"sqlite:///{tmp_path / 'kforge.db'}"
        self.env = {k: v for k, v in os.environ.items() if k != "KFORGE_DB"}
        self.env.update(TMPDIR=str(self.tmpdir), KFORGE_BUILD_ROOT=str(self.build_root), KFORGE_TIMEOUT_S="300")
        self.procs: list[subprocess.Popen] = []

    def start(self, *args: object, db: str | None = None) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "kforge", *map(str, args), "--device", "cpu", "--json", "--db", db or self.url]
        proc = subprocess.Popen(cmd, cwd=REPO, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, preexec_fn=_as_terminal_job)  # fmt: skip
        self.procs.append(proc)
        return proc

    def run(self, *args: object, timeout: float = 600) -> list[dict]:
        proc = self.start(*args)
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err
        return [json.loads(line) for line in out.splitlines()]

    def wait_for(self, proc: subprocess.Popen, ready: Callable[[], object], timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            assert proc.poll() is None, f"kforge ended early: {proc.communicate()[1][-2000:]}"
            assert time.monotonic() < deadline, "timed out waiting for kforge"
            time.sleep(0.05)

    def evaluations(self) -> list[EvaluationRow]:
        with Database(self.url) as database:
            return database.evaluations()

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:  # not yet reaped, so the pid is still ours
                kill_group(proc.pid)
                proc.wait()
        for pid in evaluator_children(self.tmpdir):
            kill_group(pid)  # each child leads its own session


@pytest.fixture
def kforge(tmp_path: Path) -> Iterator[Kforge]:
    runner = Kforge(tmp_path)
    yield runner
    runner.stop()


def test_eight_concurrent_submits_lose_nothing(kforge: Kforge, tmp_path: Path, url: str) -> None:
    """Eight processes open a new database at once (one migrates it) and each stores a solution and a verdict."""
    files = sorted(write_candidates(tmp_path / "cands", 8).iterdir())
    procs = [kforge.start("submit", f, "--problem", "relu", db=url) for f in files]
    results = [p.communicate(timeout=300) for p in procs]
    failed = "; ".join(err.strip().splitlines()[0] for p, (_, err) in zip(procs, results) if p.returncode and err.strip())
    assert [p.returncode for p in procs] == [0] * 8, failed  # one line each: pytest cuts a long message in its middle
    assert sorted(json.loads(out)["status"] for out, _ in results) == ["syntax_error"] * 4 + ["truncated"] * 4
    with Database(url) as database:
        (board,) = database.leaderboard()
        assert {e.solution_path for e in database.evaluations()} == {str(f) for f in files}
    assert (board.n_solutions, board.n_evaluations) == (8, 8)


def assert_complete(rows: list[EvaluationRow], db_path: str) -> None:
    """Every stored row is a whole verdict (EvaluationRow validates the types) and the file is sound."""
    assert all(r.status and r.cause and r.device == "cpu" and r.device_name and r.torch_version for r in rows)
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


@pytest.mark.slow
def test_sigkill_mid_compile_keeps_finished_rows_and_rerun_resumes(kforge: Kforge, tmp_path: Path) -> None:
    cands = write_candidates(tmp_path / "cands", 6, {"relu_cpp": COMPILED_RELU})
    first = kforge.start("evaluate", cands, "--problem", "relu")
    kforge.wait_for(first, lambda: list(tmp_path.glob(COMPILING)), timeout=300)  # the compiler is running
    first.send_signal(signal.SIGKILL)
    first.wait()
    deadline = time.monotonic() + 15  # the children get SIGINT when kforge dies (parent-death signal)
    while evaluator_children(kforge.tmpdir) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert evaluator_children(kforge.tmpdir) == [], "a child outlived kforge"
    assert list(kforge.build_root.glob("*/*/lock")) == [], "torch's build lock was left behind"
    stored = kforge.evaluations()
    assert sorted(Path(r.solution_path).name for r in stored) == [f"static_{i:04d}.py" for i in range(6)]
    assert_complete(stored, kforge.url.removeprefix("sqlite:///"))

    lines = kforge.run("evaluate", cands, "--problem", "relu")
    assert sorted(ln["evaluation_id"] for ln in lines if ln["reused"]) == sorted(r.id for r in stored)
    (fresh,) = [ln for ln in lines if not ln["reused"]]
    assert (Path(fresh["path"]).name, fresh["status"]) == ("relu_cpp.py", "correct")
    assert len(kforge.evaluations()) == 7


@pytest.mark.parametrize("phase", sorted(PHASES))
def test_ctrl_c_stops_children_and_cleans_up(kforge: Kforge, tmp_path: Path, phase: str) -> None:
    """Ctrl-C mid-compile or mid-run: kforge exits within seconds, its children are gone, its temp dir too, no
    build lock is left to stall the next build of that source, and the verdicts it had finished are kept."""
    source, landmark = PHASES[phase]
    cands = write_candidates(tmp_path / "cands", 3, {"candidate": source})
    proc = kforge.start("evaluate", cands, "--problem", "relu")
    kforge.wait_for(proc, lambda: list(tmp_path.glob(landmark)), timeout=400)  # a first compile may build the PCH first
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal sends to its foreground job
    proc.wait(timeout=20)
    assert proc.returncode != 0
    assert evaluator_children(kforge.tmpdir) == []
    assert list(kforge.tmpdir.glob("kforge-eval-*")) == []
    assert list(kforge.build_root.glob("*/*/lock")) == []
    assert len(kforge.evaluations()) == 3


def measure(kforge: Kforge, directory: Path, db: str) -> tuple[list[dict], float, float]:
    """(JSON lines, the parent's peak RSS in MiB, wall seconds): wait4 reports this one process's own peak."""
    start = time.monotonic()
    proc = kforge.start("evaluate", directory, "--problem", "relu", db=db)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, proc.stderr.read()[-2000:]
    return [json.loads(line) for line in out.splitlines()], usage.ru_maxrss / 1024, wall


def test_batch_of_500_stores_every_row_with_flat_parent_memory(kforge: Kforge, tmp_path: Path) -> None:
    """Peak RSS of a 500-candidate batch against a 50-candidate one: a per-candidate leak would show as growth."""
    results = {}
    for n in (50, 500):
        db = f"sqlite:///{tmp_path / f'load{n}.db'}"
        lines, rss, wall = measure(kforge, write_candidates(tmp_path / f"load{n}", n), db)
        assert len(lines) == n and not any(ln["reused"] for ln in lines)
        with Database(db) as database:
            assert len(database.evaluations()) == n
        results[n] = rss, wall
    print(f"kforge evaluate, parent peak RSS / wall: 50 candidates {results[50][0]:.0f} MiB / {results[50][1]:.1f} s,"
          f" 500 candidates {results[500][0]:.0f} MiB / {results[500][1]:.1f} s")  # fmt: skip
    assert results[500][0] - results[50][0] < 16
