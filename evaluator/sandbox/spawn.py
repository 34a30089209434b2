"""Run one evaluator child: scrubbed environment, own cwd/build dir, rlimits, a wall-clock timeout, a private pipe.

The child's stdout/stderr go to a log file that is only ever shown as evidence; results travel on a pipe
whose descriptor only the child is given.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import resource
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

from pydantic import BaseModel

from evaluator.sandbox import budgets, cgroups, forkserver
from evaluator.contracts import Limits, Status
from evaluator.protocol import Request
from evaluator.sandbox.results import ChildResult, lines

_log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
# The only variables a candidate sees: what compilers and CUDA need to work.
_KEEP_ENV = (
    "PATH", "LANG", "LC_ALL", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES",
    "TORCH_CUDA_ARCH_LIST", "CC", "CXX", "NVCC_CCBIN", "MAX_JOBS",
)
_JAIL = ROOT / "evaluator" / "sandbox" / "jail.py"
_MEMORY_POLL_S = 0.25
_GRACE_S = 2.0  # after SIGINT, before SIGKILL: torch's build removes its lock file, the child reports
_PR_SET_PDEATHSIG = 1
TOKEN_VAR = "KFORGE_CHILD_TOKEN"  # marks every process a child starts, so none can outlive it unnoticed
_TOKEN_LEN = 32
LOG = "child.log"  # in a child's scratch: its stdout and stderr, shown only as evidence
# The log's first bytes, allocated before the child starts (its size stays 0): a child that fills its disk, where
# its log lies (evaluator/sandbox/disk.py), still leaves its last words there (a traceback).
_LOG_ROOM, _FALLOC_FL_KEEP_SIZE = 1 << 20, 1
def scrubbed_env(workdir: Path, build_dir: Path, token: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in _KEEP_ENV if k in os.environ}
    env.update(
        HOME=str(workdir), TMPDIR=str(workdir), TORCH_EXTENSIONS_DIR=str(build_dir), **{TOKEN_VAR: token},
        # Triton takes its home's default when it is imported, which in the fork server is the server's home: a
        # forked child's torch.compile then wrote its kernels there, where the jail refuses it (PermissionError)
        TRITON_HOME=str(workdir),
        # Triton's kernel cache in the child's own build dir, never a shared ~/.triton: the cache holds absolute
        # paths, and the build dir has the same path in the compile and the candidate child (the cache's view)
        TRITON_CACHE_DIR=str(build_dir / "triton"),
        # the CuTe DSL's and TileLang's kernel caches likewise (their defaults: a shared folder under /tmp, ~/.tilelang)
        CUTE_DSL_CACHE_DIR=str(build_dir / "cute"), TILELANG_CACHE_DIR=str(build_dir / "tilelang"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0",
        CUDA_DEVICE_ORDER="PCI_BUS_ID",  # a GPU's index is NVML's, which reads each child's device memory (gpumemory)
        # the interpreter's own bin/ first: in a virtualenv run without activation, torch's builds call the
        # venv's `ninja`, which is on no other PATH entry
        PATH=os.pathsep.join(filter(None, [str(Path(sys.executable).parent), env.get("PATH")])),
    )
    return env


def _joining(spec: dict, group: cgroups.Cgroup | None, said: str) -> dict:
    """The jail spec with the child's cgroup to join (`said`: the resources layer's state)."""
    return spec | {"cgroup": {"procs": group.procs if group else [], "said": said}}


def jailed(spec: dict | None, cmd: list[str], group: cgroups.Cgroup | None = None, said: str = "") -> list[str]:
    """The command that starts `cmd` in the jail, joining `group`."""
    if spec is None:
        return cmd
    return [sys.executable, str(_JAIL), json.dumps(_joining(spec, group, said)), "--", *cmd]


def _server_env() -> dict[str, str]:
    """The fork server's environment, which every forked child's memory holds: a child's, with a home of its own
    and a placeholder token (each child writes its own over it: forkserver._stamp_token)."""
    home = Path(tempfile.mkdtemp(prefix="kforge-forkserver-"))
    # torch.utils.cpp_extension's import asks whether CUDA is available: through NVML, not by initialising CUDA,
    # which a forked child could not then use
    return scrubbed_env(home, home, "0" * _TOKEN_LEN) | {"PYTORCH_NVML_BASED_CUDA_CHECK": "1"}


# A Triton candidate's child on CPU runs its kernels under Triton's interpreter (no GPU to compile for). Triton reads
# the variable when it decorates a kernel, its own library's (tl.max, tl.sum) when triton is imported, which the
# fork server and every child did before their request (torch.utils.flop_counter imports it): set at exec.
TRITON_ON_CPU = {"TRITON_INTERPRET": "1"}

_refusals: set[str] = set()
# Read by the C library, the loader or an import only when a process starts, which a forked child does not: a child
# whose environment sets one starts as its own interpreter (CPU timing children's malloc tunables,
# batch.CPU_CHILD_ENV; Triton's interpreter, TRITON_ON_CPU).
_AT_EXEC = ("GLIBC_TUNABLES", "LD_PRELOAD", "MALLOC_ARENA_MAX", *TRITON_ON_CPU)


def _forked(request: dict, fds: list[int]) -> forkserver.Forked | None:
    """The child forked by the fork server, or None where it cannot be forked (said once per reason): the child
    then starts as its own interpreter, in the same jail."""
    if any(k in request["env"] for k in _AT_EXEC):
        return None
    try:
        return forkserver.server(_server_env).spawn(request, fds)
    except OSError as exc:
        if exc.strerror not in _refusals:
            _refusals.add(exc.strerror)
            _log.warning("children start as their own interpreters: %s", exc.strerror)
        return None


def start_children() -> None:
    """Start the fork server now rather than at the first child: its `import torch` (seconds) then overlaps with
    the caller's own (the CLI calls this before it imports the evaluator)."""
    if forkserver.enabled():
        forkserver.server(_server_env)


def prepare_child(limits: Limits, cap_address_space: bool, cores: set[int] | None = None, nice: int = 0) -> None:
    """Runs in the child before exec. CUDA reserves huge virtual ranges, so RLIMIT_AS only for CPU runs. RLIMIT_CPU
    caps each process at the CPU seconds its wall budget could use on every core. RLIMIT_FSIZE caps each file it
    writes at most at the disk quota (Python then gets EFBIG); RLIMIT_NPROC would not bind root. SIGINT is the
    polite stop (Python turns it into KeyboardInterrupt, and torch's build then removes its lock file), so it must
    not be inherited as ignored; the child gets it too if kforge itself dies. `cores`: where it and every thread
    and process it starts run (batch.cpu_cores); `nice`: how far they yield the CPU to kforge's other children."""
    if cores:
        os.sched_setaffinity(0, cores)
    cgroups.lower_priority(nice)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGINT, 0, 0, 0)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    cpu = int(limits.timeout_s * (os.cpu_count() or 1)) + 1  # no process may use more CPU than the wall budget allows
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    fsize = min(limits.file_size_mb, budgets.DISK_QUOTA_MB) * 2**20
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    if cap_address_space:
        cap = limits.memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def run_tool(cmd: list[str], workdir: Path, spec: dict, limits: Limits, log: Path, stop: threading.Event,
             cores: set[int] | None = None, nice: int = 0) -> int | None:
    """A program kforge trusts (the compiler of a precompiled header) run on input a candidate chose (flags read
    from its source): in the jail and under the children's seccomp filter, writing only `workdir`. Its exit
    status, or None when it ran out of time or the batch was stopped (it is killed, and its namespace with it)."""
    confined = [sys.executable, str(ROOT / "evaluator" / "sandbox" / "seccomp.py"), *cmd]
    group, said = cgroups.for_child(limits.processes, limits.memory_mb)
    with open(log, "ab") as out:
        proc = subprocess.Popen(jailed(spec, confined, group, said), cwd=workdir,
                                env=scrubbed_env(workdir, workdir, secrets.token_hex(16)), stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=lambda: prepare_child(limits, cap_address_space=False, cores=cores, nice=nice))
    deadline = time.monotonic() + limits.timeout_s
    try:
        while proc.poll() is None:
            if stop.is_set() or time.monotonic() > deadline:
                return None
            _wait_exit(proc, _MEMORY_POLL_S)
        return proc.returncode
    finally:
        _signal_group(proc, signal.SIGKILL)
        proc.wait()
        if group:
            group.close()


def _wait_exit(proc: subprocess.Popen, timeout: float) -> None:
    """Until `proc` ends or `timeout` passes, woken as it ends (its pidfd turns readable). Popen.wait(timeout)
    polls at doubling intervals up to 50 ms, so it saw an exit up to 50 ms late: inside a device's hold, the
    candidate's exit is the hold's last step. Where no pidfd can be opened, Popen.wait."""
    try:
        fd = os.pidfd_open(proc.pid)
    except OSError:  # no pidfds here, or the process is gone and reaped
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)
        return
    try:
        select.select([fd], [], [], timeout)
    finally:
        os.close(fd)


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def _carrying(token: str) -> list[int]:
    """Every process that carries the child's token in its environment."""
    marker = f"{TOKEN_VAR}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _kill_stragglers(token: str) -> int:
    """SIGKILL every process that still carries the child's token: daemons that left its process group
    (double fork + setsid) would otherwise keep running, e.g. burning CPU while the next reference is timed."""
    killed = 0
    for pid in _carrying(token):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            killed += 1
    return killed


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def _stop(proc: subprocess.Popen) -> None:
    """SIGINT to the child alone, then SIGKILL to its group after a grace period (at once if the child already
    ended: what is left of its group are compilers or threads the candidate left behind). In the jail `proc` is
    the outer process, which passes SIGINT on: sent to the whole group it reached the jailed child twice, and
    the second could cut its error report short."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGINT)
        _wait_exit(proc, _GRACE_S)
    _signal_group(proc, signal.SIGKILL)


class Child:
    """One evaluator child, started at once; `begin` sends its request (once the child is loaded and the gate, if
    any, gave it a device) and keeps the request pipe open, so a child can be talked to while it runs (`send`,
    `wait_for`): the reference server answers comparisons, a candidate waits for each handoff to be judged.
    `on_message` runs in the reader thread for every message and may return a line to send back (a candidate's
    handoff is answered that way). `runner`: a trusted program the child is started under, inside the jail (the
    profile child's ncu); `cores`: the CPUs it runs on; `nice`: its CPU priority below kforge's; `fork`: from the
    fork server (else its own interpreter); `idle_s`: how long it may go without a compiler running (a compile
    child). A jailed child is held to the disk quota."""

    def __init__(self, workdir: Path, build_dir: Path, limits: Limits, cap_address_space: bool,
                 stop: threading.Event | None = None, on_message: Callable[[dict], BaseModel | None] | None = None,
                 jail: dict | None = None, env: dict[str, str] | None = None, runner: list[str] | None = None,
                 cores: set[int] | None = None, fork: bool = True, idle_s: float | None = None, nice: int = 0):
        workdir.mkdir(parents=True, exist_ok=True)
        build_dir.mkdir(parents=True, exist_ok=True)
        self.limits, self.stop, self.on_message = limits, stop or threading.Event(), on_message
        self.excused_s = 0.0  # seconds kforge held it frozen or waiting for its device beside others (deadline)
        self.result = ChildResult(log_path=workdir / LOG, spawned=time.monotonic())
        self._arrived = threading.Condition()
        req_r, req_w = os.pipe()
        res_r, res_w = os.pipe()
        self.token = secrets.token_hex(_TOKEN_LEN // 2)
        self.cgroup, said = cgroups.for_child(limits.processes, limits.memory_mb) if jail else (None, "")
        env = scrubbed_env(workdir, build_dir, self.token) | (env or {})
        with open(self.result.log_path, "wb") as log:
            ctypes.CDLL(None).fallocate(log.fileno(), _FALLOC_FL_KEEP_SIZE, ctypes.c_long(0), ctypes.c_long(_LOG_ROOM))
            self.proc = _forked({"cwd": str(workdir), "env": env, "jail": jail and _joining(jail, self.cgroup, said),
                                 "limits": limits.model_dump(), "cap_address_space": cap_address_space,
                                 "cores": sorted(cores or []), "nice": nice}, [log.fileno(), req_r, res_w]) \
                if runner is None and fork and forkserver.enabled() else None
            if self.proc is None:
                self.proc = subprocess.Popen(
                    jailed(jail, [*(runner or []), sys.executable, "-m", "evaluator.child.main", str(req_r), str(res_w)],
                            self.cgroup, said), cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, pass_fds=(req_r, res_w), start_new_session=True,
                    preexec_fn=lambda: prepare_child(limits, cap_address_space, cores, nice),
                )
        os.close(req_r)
        os.close(res_w)
        self._requests = os.fdopen(req_w, "wb")
        self._lock = threading.Lock()  # the reader thread answers handoffs while the caller may send
        self._reader = threading.Thread(target=self._read, args=(res_r,), daemon=True)
        self._reader.start()
        self._watch = budgets.Watch.of(jail, self.pids, idle_s) if jail else None

    def pids(self) -> list[int]:
        """Its processes: those in its cgroup, else those carrying its token."""
        return self.cgroup.pids() if self.cgroup else _carrying(self.token)

    def _read(self, fd: int) -> None:
        """Each message is stamped with the parent's clock on arrival: the child's timings are checked against it."""
        with os.fdopen(fd, "rb") as fh:
            for line in lines(fh):
                message = _parse(line) | {"_t": time.monotonic()}
                with self._arrived:
                    self.result.messages.append(message)
                    self._arrived.notify_all()
                reply = self.on_message(message) if self.on_message else None
                if reply is not None:
                    self.send(reply)
        with self._arrived:
            self._arrived.notify_all()

    def send(self, message: BaseModel) -> None:
        """One line of the protocol (evaluator.protocol) on the request pipe; a child that already died is reported
        by how it ended. A message that cannot be written as JSON raises here: kforge's own error, which would
        otherwise leave the child waiting for its request until its timeout."""
        line = message.model_dump_json().encode() + b"\n"
        with self._lock, contextlib.suppress(BrokenPipeError, ValueError, OSError):  # ValueError: a closed pipe
            self._requests.write(line)
            self._requests.flush()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Every process of the child stopped meanwhile (the reference is timed beside it: nothing of the candidate
        may run then); without a cgroup, its process group (a process that left the group goes on)."""
        self._freeze(True)
        try:
            yield
        finally:
            self._freeze(False)

    def _freeze(self, frozen: bool) -> None:
        if self.cgroup:
            self.cgroup.freeze(frozen)
        else:
            cgroups.freeze_group(self.proc.pid, frozen)

    def freeze(self) -> None:
        """Every process of the child stopped until `thaw` (another candidate is timed on its device: sharing.py)."""
        self._freeze(True)

    def thaw(self, frozen_s: float) -> None:
        """Let it go on after `freeze`; the `frozen_s` it stood still are added to its budget."""
        self._freeze(False)
        self.excused_s += frozen_s

    def kill(self) -> None:
        """SIGKILL to its whole group now; its runner's `finish` reads the death."""
        _signal_group(self.proc, signal.SIGKILL)

    def deadline(self) -> float:
        """When its run budget ends: from its start, plus the seconds kforge made it stand still (`excused_s`)."""
        return self.result.started + self.limits.timeout_s + self.excused_s

    def begin(self, request: Request, gate: Callable[[], str | None] | None = None) -> None:
        """The request goes out, and the child's clock starts, once the child is loaded (interpreter, jail, torch:
        seconds) and then the gate (if any) gives it a device: a device is never held by a child still loading
        (on the H100, children and references that were not loaded held it 114 s of a 444 s warm level-1 batch).
        The device comes with the request (the child pins itself). A child that dies loading is sent its request
        all the same: how it ended is its result."""
        self.wait_for("loaded")
        gpu = gate() if gate else None
        self.send(request.model_copy(update={"gpu": gpu}))
        self.result.started = time.monotonic()

    def wait_for(self, event: str, since: int = 0, timeout_s: float | None = None) -> dict | None:
        """The first `event` message from index `since` on; None if the child ended, ran out of time or memory."""
        deadline = time.monotonic() + (self.limits.timeout_s if timeout_s is None else timeout_s)
        while True:
            with self._arrived:
                found = next((m for m in self.result.messages[since:] if m.get("event") == event), None)
                if found or not self._reader.is_alive():
                    return found
                self._arrived.wait(timeout=_MEMORY_POLL_S)
            if self._ended_early(deadline):
                return None

    def _ended_early(self, deadline: float) -> bool:
        """Whether it must be stopped now: the batch was stopped, its time or host memory ran out, or a budget of the
        parent's own (recorded in result.over; compilers idle is a timeout)."""
        result = self.result
        result.cancelled = self.stop.is_set()
        result.memory_exceeded = _rss_bytes(self.proc.pid) > self.limits.memory_mb * 2**20
        result.over = self._watch.over(result) if self._watch else None
        result.timed_out = time.monotonic() > deadline or bool(result.over and result.over.status is Status.TIMEOUT)
        return result.cancelled or result.timed_out or result.memory_exceeded or result.over is not None

    def finish(self, wait: bool = True) -> ChildResult:
        """Wait for the child to end (timeout, memory, stop) unless told not to, then close its request pipe and
        stop it and whatever it left behind."""
        try:
            if wait:
                self._wait()
            else:
                self.result.wall_s = time.monotonic() - self.result.started
        finally:
            with self._lock, contextlib.suppress(BrokenPipeError):  # a line left unsent to a child that died
                self._requests.close()
            _stop(self.proc)
            self.result.returncode = self.proc.wait()
            self.result.stragglers = _kill_stragglers(self.token)
            if self._watch and not self.result.over:  # what it left on disk, read once nothing of it runs
                self.result.over = self._watch.at_end(self.result.stage)
            if self.cgroup:
                self.result.memory_exceeded |= self.cgroup.oom_killed()
                self.cgroup.close()
        self._reader.join(timeout=5)
        return self.result

    def _wait(self) -> None:
        """Until it ends, or must be stopped."""
        while self.proc.poll() is None and not self._ended_early(self.deadline()):
            _wait_exit(self.proc, _MEMORY_POLL_S)
        self.result.wall_s = time.monotonic() - self.result.started


def _parse(line: bytes) -> dict:
    try:
        message = json.loads(line)
    except ValueError:
        message = None
    return message if isinstance(message, dict) else {"event": "garbled", "text": line[:200].decode(errors="replace")}
