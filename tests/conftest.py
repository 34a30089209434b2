"""Database URLs for the tests: a `url` test runs on SQLite and, when $KFORGE_TEST_POSTGRES_URL names a server
(scripts/ci_postgres.sh starts one), again on a scratch PostgreSQL database of its own."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from evaluator.parent.jail_spec import EXTRA_READ_VAR

POSTGRES_ENV = "KFORGE_TEST_POSTGRES_URL"


def scratch_postgres() -> Iterator[str]:
    """A new database per test (the URL's user needs CREATEDB), dropped afterwards even if connections linger."""
    base = os.environ.get(POSTGRES_ENV)
    if not base:
        pytest.skip(f"{POSTGRES_ENV} is not set (scripts/ci_postgres.sh starts a server and prints one)")
    admin = create_engine(make_url(base), isolation_level="AUTOCOMMIT")
    name = f"kforge_t_{secrets.token_hex(6)}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield admin.url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE "{name}" WITH (FORCE)')
        admin.dispose()


# Modules whose checks read speedups, paired timings or wall-clock budgets: scripts/test.sh runs them alone, after
# the rest has run on parallel workers, so no other test's load lands in what they measure.
TIMED_MODULES = frozenset({
    "test_api.py", "test_attacks_on_kforge.py", "test_budgets.py", "test_evaluator.py", "test_harness_reach.py",
    "test_pacing.py", "test_references.py", "test_reward_hacking.py", "test_service.py", "test_sharing.py",
    "test_timing.py", "test_timing_trust.py", "test_trusted_timing.py"})


def pytest_collection_modifyitems(items) -> None:
    for item in items:
        if item.path.name in TIMED_MODULES:
            item.add_marker(pytest.mark.timed)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'kforge.db'}"


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, sqlite_url: str) -> Iterator[str]:
    if request.param == "sqlite":
        yield sqlite_url
    else:
        yield from scratch_postgres()


COMPILED_RELU = '''"""A real C++ ReLU: its compile (tens of seconds here) is what the crash test interrupts."""
import torch
from torch.utils.cpp_extension import load_inline

_ext = load_inline(
    name="kforge_survival_relu",
    cpp_sources="""
#include <torch/extension.h>
torch::Tensor relu(torch::Tensor x) {
    x = x.contiguous();
    auto y = torch::empty_like(x);
    const float* in = x.data_ptr<float>();
    float* out = y.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) out[i] = in[i] > 0.f ? in[i] : 0.f;
    return y;
}
""",
    functions=["relu"],
    extra_cflags=["-O3"],
)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return _ext.relu(x)
'''


# -- evaluator fixtures: one build cache per test run, so a candidate file is compiled once whoever evaluates it -

ROOT = Path(__file__).resolve().parent.parent
# Jailed children read only the checkout's code, and what this names: the compiled kernel the adversarial
# candidates share (they import it from tests/adversarial), and the honest Triton candidate, whose source the
# cache poisoner reads to aim at its build.
os.environ[EXTRA_READ_VAR] = os.pathsep.join([str(ROOT / "tests" / "adversarial"),
                                              str(ROOT / "tests" / "candidates" / "triton" / "relu" / "honest.py")])
SOLUTIONS = ROOT / "solutions"
CANDIDATES = Path(__file__).parent / "candidates"


@pytest.fixture(scope="session")
def build_root(tmp_path_factory) -> Path:
    """The run's build cache: $KFORGE_TEST_BUILD_ROOT where scripts/test.sh shares one between its parallel workers
    and its serial part (the cache is made for kforges sharing it: one compile of a key at a time), else one of
    this session's own."""
    shared = os.environ.get("KFORGE_TEST_BUILD_ROOT")
    if not shared:
        return tmp_path_factory.mktemp("builds")
    Path(shared).mkdir(parents=True, exist_ok=True)
    return Path(shared)


@pytest.fixture(scope="session")
def adversarial_build_root(build_root) -> Path:
    """The build root with the adversarial candidates' shared kernel and native thread built in
    (tests/adversarial/prebuilt.py)."""
    from tests.adversarial.prebuilt import prebuild

    prebuild(build_root, "tests.adversarial.tiny_ext")
    prebuild(build_root, "tests.adversarial.native_spy")
    return build_root


@pytest.fixture(scope="session")
def gpu_adversarial_build_root(build_root) -> Path:
    from tests.adversarial.prebuilt import prebuild

    prebuild(build_root, "tests.adversarial.gpu_tiny_ext")
    return build_root


@pytest.fixture(scope="session")
def cpu_settings(build_root):
    from evaluator import EvalSettings

    # one process pair: these tests judge verdicts, not the spread that more pairs narrow (tests/test_pacing.py)
    return EvalSettings(device="cpu", size="small", trials=3, warmup_ms=50, rep_ms=300, jobs=2, build_root=build_root,
                        cpu_pairs=1)


def kforge_runner(tmp_path: Path, build_root: Path, **env_extra: str):
    """`python -m kforge ...` as a user runs it: its own HOME and db, the test run's build cache and the helpers its
    candidates read (EXTRA_READ_VAR), no other inherited KFORGE_* settings. Calls assert the exit code (`expect`) and
    return the CompletedProcess."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("KFORGE_")}
    env.update(HOME=str(tmp_path / "home"), KFORGE_BUILD_ROOT=str(build_root), KFORGE_DB=f"sqlite:///{tmp_path / 'k.db'}",
               COLUMNS="200", **{EXTRA_READ_VAR: os.environ[EXTRA_READ_VAR]}, **env_extra)

    def run(*args: str, expect: int = 0) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "kforge", *args], capture_output=True, text=True, env=env, timeout=900)
        assert proc.returncode == expect, proc.stdout + proc.stderr
        return proc

    run.db_url = env["KFORGE_DB"]
    run.env = env
    return run


def running(marker: str) -> list[str]:
    """Live processes (not zombies) whose command line carries the marker."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            alive = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
            if alive and marker.encode() in (proc / "cmdline").read_bytes():
                found.append(proc.name)
        except OSError:
            continue
    return found


@pytest.fixture
def database(tmp_path):
    """An empty SQLite kforge db in the test's folder (modules that need one filled define their own)."""
    from db import Database

    with Database(f"sqlite:///{tmp_path / 'kforge.db'}") as db:
        yield db


@pytest.fixture
def settings(tmp_path):
    """CPU, small sizes, few trials and short timing: an agent-loop test judges many candidates."""
    from evaluator import EvalSettings
    from evaluator.contracts import Limits

    return EvalSettings(device="cpu", size="small", trials=2, leak_calls=2, warmup_ms=10, rep_ms=50, min_reps=3,
                        max_reps=50, build_root=tmp_path / "builds", jobs=1, limits=Limits(timeout_s=600), cpu_pairs=1)


def relu_timing_case(samples_ms: list[float], monkeypatch, device: str = "cuda", size: str = "full"):
    """The judge's view of a timed run of relu (2 GiB in and out at full size) with the given samples, on an 'H100'
    (or this CPU): what its timing checks and its timing report read."""
    from evaluator import EvalSettings
    from evaluator.verdict.case import Case, Reference
    from evaluator.sandbox.results import ChildResult
    from reference_problems import resolve_problem

    monkeypatch.setattr("evaluator.verdict.speed.device_name", lambda device: "NVIDIA H100 80GB HBM3")
    messages = [{"event": "stage", "stage": "timed", "_t": 0.0},
                {"event": "timing", "which": "model", "samples": samples_ms, "fill_s": 0.0, "_t": 1.0,
                 "untimed_calls": 3, "fresh_inputs": "fresh"}]
    ref = Reference(meta={}, trials={"timing": {"io_bytes": 2**31, "max_input_numel": 2**28}})
    return Case(ChildResult(messages=messages, log_path=Path("/nonexistent")), ref, resolve_problem("relu").meta,
                 EvalSettings(device=device, size=size), {})


SPREAD = 1.25  # this VM's spread between one kernel's evaluations in fresh processes (up to ~20 %)


def gains_nothing(v, honest, spread: float = SPREAD) -> None:
    """Caught, or correct at no more than its honest twin's speed: the top of the twin's own interval, and this
    VM's spread between one kernel's evaluations in fresh processes on top (up to ~20 %; profile_hook, whose hook
    slows every Python call of its server, once timed 1.17x its twin); the attacks it stands for were paid 10-34x."""
    from evaluator import Status

    assert honest.status is Status.CORRECT, honest.evidence
    top = max([honest.speedup, *((honest.evidence.timing.speedup_interval or []) if honest.evidence.timing else [])])
    assert v.status in (Status.CHEAT, Status.INCORRECT) or v.speedup <= spread * top, \
        (v.status, v.speedup, honest.speedup, top, v.evidence.cause)
