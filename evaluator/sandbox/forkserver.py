"""Evaluator children forked from a process that has already imported torch and the evaluator, instead of each
starting a fresh interpreter: a child is ready in tens of milliseconds instead of seconds (`import torch` alone
is 4.5-5 s on the H100 hosts), and the jail is built after the fork exactly as after an exec.

This is kforge's end of it. The server (evaluator/child/forkserver.py) is started fresh (`python -m
evaluator.child.forkserver FD`) with the children's scrubbed environment and
nothing of kforge's memory: every child is a copy of it, so it must never hold what a candidate may not read
(kforge's own environment, the database's URL, the batch's secret seeds). It never runs torch code (no CUDA, no
thread pool: a fork would copy them half made). It lives as long as kforge's process: when kforge ends, its
socket closes, the server exits, and each child's parent-death signal stops it.

Per child the server forks the jail's outer process, which takes the descriptors kforge sent (log, request,
result) and nothing else, a session of its own, the child's cwd, environment and limits
(spawn.prepare_child), then builds the jail (evaluator.sandbox.jail.enter) and runs evaluator.child.main in it. Each
child's exit status goes back to kforge on the socket, which its `Forked` handle reads like a Popen's.
`use(False)` starts every child as its own interpreter again (the same jail, for comparisons): kforge's commands
set it from KFORGE_FORK_SERVER (kforge/settings.py).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from typing import Callable

MESSAGE = 1 << 20  # one spawn request: the jail spec (paths) and the environment
_enabled = True


def use(on: bool) -> None:
    """Whether this process's children are forked from the server (else each is its own interpreter): a choice of
    the process, as the server is one per process."""
    global _enabled
    _enabled = on


def enabled() -> bool:
    return _enabled


class Forked:
    """A forked child's outer process, as much of a Popen as spawn.Child uses: pid, poll, wait, returncode.
    The server reaps it and reports its exit status."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None
        self._ended = threading.Event()

    def _exited(self, code: int) -> None:
        self.returncode = code
        self._ended.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"forked child {self.pid}", timeout)
        return self.returncode


class Server:
    """kforge's end of the fork server: `spawn` sends a child's request with its descriptors and returns its
    handle; a reader thread routes the server's replies (the pid of each child started, each exit status)."""

    def __init__(self, env: dict[str, str]):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.log = os.path.join(env["HOME"], "server.log")  # what torch prints at import stays off kforge's output
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "evaluator.child.forkserver", str(theirs.fileno())],
                                         cwd=env["HOME"], env=env, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)  # the terminal's ^C is kforge's to pass on
        theirs.close()
        atexit.register(shutil.rmtree, env["HOME"], True)  # its home and log go with kforge's process
        self._sock, self._lock, self._next = ours, threading.Lock(), 0
        self._started: dict[int, dict] = {}  # request id -> the server's reply, once it came
        self._children: dict[int, Forked] = {}
        self._arrived = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def spawn(self, request: dict, fds: list[int]) -> Forked:
        with self._lock:
            self._next += 1
            ident = self._next
            socket.send_fds(self._sock, [json.dumps(request | {"id": ident}).encode()], fds)
        with self._arrived:
            self._arrived.wait_for(lambda: ident in self._started or self._sock.fileno() < 0)
            reply = self._started.pop(ident, None) or {"error": f"the fork server ended (its log: {self.log})"}
        if "error" in reply:
            raise OSError(0, reply["error"])
        return self._children[reply["pid"]]

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(MESSAGE)
            except OSError:
                data = b""
            if not data:
                break
            reply = json.loads(data)
            with self._arrived:
                if "exited" in reply:
                    self._children.pop(reply["exited"])._exited(reply["code"])
                    continue
                if "pid" in reply:
                    self._children[reply["pid"]] = Forked(reply["pid"])
                self._started[reply["id"]] = reply
                self._arrived.notify_all()
        with self._arrived:  # the server is gone, and its children with it (their parent-death signal)
            for child in self._children.values():
                child._exited(-signal.SIGKILL)
            self._children.clear()
            self._sock.close()
            self._arrived.notify_all()

    def alive(self) -> bool:
        return self._sock.fileno() >= 0 and self.proc.poll() is None


_server: Server | None = None
_server_lock = threading.Lock()


def server(make_env: Callable[[], dict[str, str]]) -> Server:
    """The process's fork server, started at first use (and again if it died) with the environment `make_env`
    gives."""
    global _server
    with _server_lock:
        if _server is None or not _server.alive():
            _server = Server(make_env())
        return _server
