"""Children forked from the fork server (evaluator/sandbox/forkserver.py), as real jailed children: loaded at once, marked
with their own token where kforge looks for what a child left behind, and gone with the server. The jail itself is
tested through them by tests/test_sandbox.py (its `memory` attack: no kforge secret in a child's memory)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from evaluator.child import forkserver as forkserver_main
from evaluator.sandbox import forkserver, spawn
from evaluator.contracts import Limits
from evaluator.parent.jail_spec import jail_spec
from evaluator.sandbox.spawn import TOKEN_VAR, Child, jailed, prepare_child
from test_protocol import _Stray


def _child(base: Path, name: str) -> Child:
    workdir = base / name
    workdir.mkdir()
    return Child(workdir, workdir / "build", Limits(timeout_s=120), cap_address_space=True, jail=jail_spec([workdir], []))


@pytest.fixture(params=[True, False], ids=["forked", "exec"])
def fork(request: pytest.FixtureRequest):
    """This test's children forked from the server, or each its own interpreter (forkserver.use)."""
    forkserver.use(request.param)
    yield request.param
    forkserver.use(True)


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


def test_both_ways_of_starting_a_child_give_the_same_clear_error(tmp_path: Path, fork: bool) -> None:
    child = _child(tmp_path, "child")
    assert isinstance(child.proc, forkserver.Forked) == fork
    child.begin(_Stray())
    result = child.finish()
    assert result.returncode == 1 and result.last("error")["exc_type"] == "MalformedRequest"


def test_kforge_fork_server_reaches_the_evaluator_through_kforges_settings(monkeypatch) -> None:
    """kforge/settings.py reads KFORGE_FORK_SERVER; the evaluator reads no environment, it is told (forkserver.use)."""
    from typer.testing import CliRunner

    from kforge import cli
    from kforge.cli_report import register

    register()
    monkeypatch.setenv("KFORGE_FORK_SERVER", "0")
    try:
        assert CliRunner().invoke(cli.app, ["problems", "--json"]).exit_code == 0
        assert not forkserver.enabled()
    finally:
        forkserver.use(True)


def test_a_server_that_cannot_fork_usable_children_says_why_and_children_start_as_interpreters(
        tmp_path: Path, monkeypatch, caplog) -> None:
    """A server refuses (as it does where CUDA was initialised before it forked): each request gets the reason,
    and spawn.Child starts its child the exec way, saying so once."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    refusing = threading.Thread(target=forkserver_main.serve, args=(theirs, "CUDA was initialised"), daemon=True)
    refusing.start()
    client = forkserver.Server.__new__(forkserver.Server)  # the client half alone, on this socket
    client._sock, client._lock, client._next, client._started, client._children = ours, threading.Lock(), 0, {}, {}
    client._arrived = threading.Condition()
    threading.Thread(target=client._read, daemon=True).start()
    monkeypatch.setattr(forkserver, "server", lambda make_env: client)
    r, w = os.pipe()
    with pytest.raises(OSError, match="CUDA was initialised"):
        client.spawn({}, [r, w, w])  # its descriptors are closed on the server's side either way
    with caplog.at_level(logging.WARNING):
        children = [_child(tmp_path, f"exec{i}") for i in range(2)]
    assert not any(isinstance(c.proc, forkserver.Forked) for c in children)
    assert [r.message for r in caplog.records].count("children start as their own interpreters: CUDA was initialised") == 1
    for child in children:
        child.begin(_Stray())
        assert child.finish().last("error")["exc_type"] == "MalformedRequest"
    ours.shutdown(socket.SHUT_RDWR)  # as kforge's exit does: the reader's recv ends too
    refusing.join(timeout=10)
    assert not refusing.is_alive()  # the server ends when kforge's end closes


def test_sigint_is_the_polite_stop_either_way(tmp_path: Path, fork: bool) -> None:
    """kforge's stop is SIGINT first: a child turns it into KeyboardInterrupt (torch's build then removes its lock
    file) and says so, forked or exec'd, rather than dying of the signal."""
    child = _child(tmp_path, "child")
    assert child.wait_for("loaded")
    inner = int(Path(f"/proc/{child.proc.pid}/task/{child.proc.pid}/children").read_text().split()[0])
    os.kill(inner, signal.SIGINT)  # the child itself, inside the jail's outer process
    child.proc.wait(timeout=30)
    result = child.finish()
    assert result.returncode == 1 and result.last("error")["exc_type"] == "KeyboardInterrupt", result.messages


# Counts the SIGINTs it gets, until a second after the first; what it saw goes to a file in its work dir.
_COUNT_SIGINTS = """
import signal, time
from pathlib import Path
seen = []
signal.signal(signal.SIGINT, lambda *_: seen.append(time.monotonic()))
Path("ready").touch()
end = time.monotonic() + 60
while time.monotonic() < end and (not seen or time.monotonic() < seen[0] + 1.0):
    time.sleep(0.01)
Path("sigints").write_text(str(len(seen)))
"""


def test_kforges_stop_reaches_a_jailed_child_once(tmp_path: Path) -> None:
    """The jail's outer process passes SIGINT on to the child; a SIGINT to their whole group reached the child
    twice, and the second could cut its error report short."""
    limits = Limits(timeout_s=120)
    proc = subprocess.Popen(jailed(jail_spec([tmp_path], []), [sys.executable, "-c", _COUNT_SIGINTS]), cwd=tmp_path,
                            start_new_session=True, preexec_fn=lambda: prepare_child(limits, cap_address_space=False))
    deadline = time.monotonic() + 60
    while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # the outer process's handlers are set just after it forks the child
    spawn._stop(proc)
    assert proc.wait(timeout=10) == 0 and (tmp_path / "sigints").read_text() == "1"

