"""The fork server itself (kforge's end: evaluator/sandbox/forkserver.py): a process that has imported torch and
the evaluator once and forks every child from that state. Per child it forks the jail's outer process, which
builds the jail and runs evaluator.child.main in it; each child's exit status goes back to kforge on the socket.
It never runs torch code itself (no CUDA, no thread pool: a fork would copy them half made)."""

from __future__ import annotations

import ctypes
import json
import os
import random
import selectors
import signal
import socket
import sys
import tempfile
import warnings

from evaluator.sandbox.forkserver import MESSAGE


def _outer(request: dict, log: int, req_r: int, res_w: int) -> None:
    """The jail's outer process of one child, in the forked copy of the server. Never returns."""
    from evaluator.sandbox import jail, spawn
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
        _stamp_token(spawn.TOKEN_VAR, request["env"][spawn.TOKEN_VAR])
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # found again from the child's TMPDIR
        random.seed()  # children would otherwise share one sequence
        spawn.prepare_child(Limits(**request["limits"]), request["cap_address_space"],
                              set(request["cores"]) if request["cores"] else None, request["nice"])
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
    kforge finds what a child left behind (spawn._kill_stragglers)."""
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_void_p
    where = libc.getenv(name.encode())
    if not where or ctypes.string_at(where) != b"0" * len(token):
        raise OSError(0, f"the fork server's environment has no placeholder for {name}")
    ctypes.memmove(where, token.encode(), len(token))


def _child(req_r: int, res_w: int) -> None:
    from evaluator.child import main

    # as a fresh `python -m evaluator.child.main R W` has them: a candidate sees the same process either way (the
    # adversarial ones find the channel in argv), and SIGINT is KeyboardInterrupt again (prepare_child reset it
    # to the default action), the polite stop after which torch's build removes its lock file
    sys.argv = [main.__file__, str(req_r), str(res_w)]
    signal.signal(signal.SIGINT, signal.default_int_handler)
    main.main(req_r, res_w)


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
                    data, fds, _flags, _addr = socket.recv_fds(sock, MESSAGE, 3)
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
    import evaluator.child.main  # noqa: F401 - what every child would import: torch, the evaluator, landlockpy
    from evaluator.child import overrides

    overrides.take_base()  # once here, not in every child (evaluator/child/overrides.py)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve(socket.socket(fileno=int(sys.argv[1])), _cuda_unforkable())


if __name__ == "__main__":
    main()
