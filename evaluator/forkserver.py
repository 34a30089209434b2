"""Evaluator children forked from a process that has already imported torch and the evaluator, instead of each
starting a fresh interpreter: a child is ready in tens of milliseconds instead of seconds (`import torch` alone
is 4.5-5 s on the H100 hosts), and the jail is built after the fork exactly as after an exec.

The server is started fresh (`python -m evaluator.forkserver FD`) with the children's scrubbed environment and
nothing of kforge's memory: every child is a copy of it, so it must never hold what a candidate may not read
(kforge's own environment, the database's URL, the batch's secret seeds). It never runs torch code (no CUDA, no
thread pool: a fork would copy them half made). It lives as long as kforge's process: when kforge ends, its
socket closes, the server exits, and each child's parent-death signal stops it.

Per child the server forks the jail's outer process, which takes the descriptors kforge sent (log, request,
result) and nothing else, a session of its own, the child's cwd, environment and limits
(sandbox.prepare_child), then builds the jail (evaluator.jail.enter) and runs evaluator.child.main in it. Each
child's exit status goes back to kforge on the socket, which its `Forked` handle reads like a Popen's.
`KFORGE_FORK_SERVER=0` starts every child as its own interpreter again (the same jail, for comparisons).
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import random
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import warnings
from typing import Callable

_MESSAGE = 1 << 20  # one spawn request: the jail spec (paths) and the environment


def enabled() -> bool:
    return os.environ.get("KFORGE_FORK_SERVER", "1") != "0"


class Forked:
    """A forked child's outer process, as much of a Popen as sandbox.Child uses: pid, poll, wait, returncode.
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
            self.proc = subprocess.Popen([sys.executable, "-m", "evaluator.forkserver", str(theirs.fileno())],
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
                data = self._sock.recv(_MESSAGE)
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


# --- the server's side -------------------------------------------------------------------------------------

def _outer(request: dict, log: int, req_r: int, res_w: int) -> None:
    """The jail's outer process of one child, in the forked copy of the server. Never returns."""
    from evaluator import jail, sandbox
    from evaluator.contracts import Limits

    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        for fd, target in ((null, 0), (log, 1), (log, 2)):
            os.dup2(fd, target)
        keep = {0, 1, 2, req_r, res_w}
        for fd in map(int, os.listdir("/proc/self/fd")):
            if fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass  # the listing's own descriptor, already closed
        _stamp_token(sandbox.TOKEN_VAR, request["env"][sandbox.TOKEN_VAR])
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # found again from the child's TMPDIR
        random.seed()  # children would otherwise share one sequence
        sandbox.prepare_child(Limits(**request["limits"]), request["cap_address_space"],
                              set(request["cores"]) if request["cores"] else None)
        run = lambda: _child(req_r, res_w)  # noqa: E731
        if request["jail"] is None:
            run()
        jail.enter(request["jail"], run)
    except BaseException as exc:  # noqa: BLE001 - said in the child's log, which kforge shows as evidence
        print(f"kforge fork server: could not start the child: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    os._exit(127)


def _stamp_token(name: str, token: str) -> None:
    """Write this child's token over the placeholder of the environment block the server started with, which is
    what /proc/PID/environ shows for this process and every process it forks without an exec: the token is how
    kforge finds what a child left behind (sandbox._kill_stragglers)."""
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_void_p
    where = libc.getenv(name.encode())
    if not where or ctypes.string_at(where) != b"0" * len(token):
        raise OSError(0, f"the fork server's environment has no placeholder for {name}")
    ctypes.memmove(where, token.encode(), len(token))


def _child(req_r: int, res_w: int) -> None:
    from evaluator import child

    # as a fresh `python -m evaluator.child R W` has them: a candidate sees the same process either way (the
    # adversarial ones find the channel in argv), and SIGINT is KeyboardInterrupt again (prepare_child reset it
    # to the default action), the polite stop after which torch's build removes its lock file
    sys.argv = [child.__file__, str(req_r), str(res_w)]
    signal.signal(signal.SIGINT, signal.default_int_handler)
    child.main(req_r, res_w)


def _fork(sock: socket.socket, data: bytes, fds: list[int], children: dict[int, int],
          watch: selectors.BaseSelector, refuse: str) -> None:
    request = json.loads(data)
    reply = {"id": request["id"], "error": refuse}
    try:
        if not refuse:
            log, req_r, res_w = fds
            pid = os.fork()
            if pid == 0:
                _outer(request, log, req_r, res_w)
            pidfd = os.pidfd_open(pid)
            children[pidfd] = pid
            watch.register(pidfd, selectors.EVENT_READ)
            reply = {"id": request["id"], "pid": pid}
    except (OSError, ValueError) as exc:
        reply["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        for fd in fds:
            os.close(fd)
    sock.send(json.dumps(reply).encode())


def serve(sock: socket.socket, refuse: str = "") -> None:
    """Fork a child per request (or answer each with `refuse`, why it cannot); report each one's exit status; end
    when kforge's end of the socket closes."""
    children: dict[int, int] = {}  # pidfd -> pid
    with selectors.DefaultSelector() as watch:
        watch.register(sock, selectors.EVENT_READ)
        while True:
            for key, _ in watch.select():
                if key.fileobj is sock:
                    data, fds, _flags, _addr = socket.recv_fds(sock, _MESSAGE, 3)
                    if not data:
                        return
                    _fork(sock, data, fds, children, watch, refuse)
                    continue
                watch.unregister(key.fd)
                pid = children.pop(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                sock.send(json.dumps({"exited": pid, "code": os.waitstatus_to_exitcode(status)}).encode())


def _cuda_unforkable() -> str:
    """Why a forked child could not use CUDA, or "": torch refuses CUDA in a process forked after CUDA's driver
    was initialised (torch.utils.cpp_extension's import asks whether CUDA is available: with
    PYTORCH_NVML_BASED_CUDA_CHECK=1, in the server's environment, it asks NVML instead). A probe child says."""
    import torch

    pid = os.fork()
    if pid == 0:
        os._exit(3 if torch.cuda._is_in_bad_fork() else 0)
    if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0:
        return ""
    return "CUDA was initialised in the fork server before it forked (torch would refuse it in the child)"


def main() -> None:
    # OpenBLAS (numpy's) keeps an idle thread pool, which it stops around a fork itself (pthread_atfork)
    warnings.filterwarnings("ignore", r"This process .* is multi-threaded", DeprecationWarning)
    import evaluator.child  # noqa: F401 - what every child would import: torch, the evaluator, landlockpy
    from evaluator import overrides

    overrides.take_base()  # once here, not in every child (evaluator/overrides.py)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve(socket.socket(fileno=int(sys.argv[1])), _cuda_unforkable())


if __name__ == "__main__":
    main()
