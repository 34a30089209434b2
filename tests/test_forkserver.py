"""Children forked from the fork server (evaluator/forkserver.py), as real jailed children: loaded at once, marked
with their own token where kforge looks for what a child left behind, and gone with the server. The jail itself is
tested through them by tests/test_sandbox.py (its `memory` attack: no kforge secret in a child's memory)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from evaluator import forkserver
from evaluator.contracts import Limits
from evaluator.jail_rules import jail_spec
from evaluator.sandbox import TOKEN_VAR, Child
from test_protocol import _Stray


def _child(base: Path, name: str) -> Child:
    workdir = base / name
    workdir.mkdir()
    return Child(workdir, workdir / "build", Limits(timeout_s=120), cap_address_space=True, jail=jail_spec([workdir], []))


def _environ(pid: int) -> list[bytes]:
    return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")


def test_a_forked_child_loads_at_once_and_carries_its_own_token(tmp_path: Path) -> None:
    _child(tmp_path, "first").finish(wait=False)  # the server is up (its own start is `import torch`)
    started = time.monotonic()
    child = _child(tmp_path, "second")
    assert child.wait_for("loaded") and time.monotonic() - started < 0.5  # an interpreter with torch: seconds
    inner = int(Path(f"/proc/{child.proc.pid}/task/{child.proc.pid}/children").read_text().split()[0])
    mark = f"{TOKEN_VAR}={child.token}".encode()
    assert mark in _environ(child.proc.pid) and mark in _environ(inner)  # forks without an exec, both
    child.begin(_Stray())
    result = child.finish()
    assert result.returncode == 1 and result.last("error")["exc_type"] == "MalformedRequest"


def test_when_the_server_dies_its_children_end_and_the_next_child_gets_a_new_one(tmp_path: Path) -> None:
    child = _child(tmp_path, "orphan")
    assert child.wait_for("loaded")
    server = forkserver.server(lambda: {})
    server.proc.send_signal(signal.SIGKILL)
    assert child.proc.wait(timeout=30) < 0  # its outer process got its parent-death signal
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{child.proc.pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{child.proc.pid}")
    child.finish(wait=False)
    again = _child(tmp_path, "next")
    assert again.wait_for("loaded") and forkserver.server(lambda: {}) is not server
    again.finish(wait=False)


@pytest.mark.parametrize("fork", ["1", "0"])
def test_both_ways_of_starting_a_child_give_the_same_clear_error(tmp_path: Path, monkeypatch, fork: str) -> None:
    monkeypatch.setenv("KFORGE_FORK_SERVER", fork)
    child = _child(tmp_path, "child")
    assert isinstance(child.proc, forkserver.Forked) == (fork == "1")
    child.begin(_Stray())
    result = child.finish()
    assert result.returncode == 1 and result.last("error")["exc_type"] == "MalformedRequest"
