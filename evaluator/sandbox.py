"""Run one evaluator child: scrubbed environment, own cwd/build dir, rlimits, a wall-clock timeout, a private pipe.

The child's stdout/stderr go to a log file that is only ever shown as evidence; results travel on a pipe
whose descriptor only the child is given.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from pydantic import BaseModel, Field

from evaluator.contracts import Limits

ROOT = Path(__file__).resolve().parent.parent
# The only variables a candidate sees: what compilers and CUDA need to work.
_KEEP_ENV = (
    "PATH", "LANG", "LC_ALL", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES",
    "TORCH_CUDA_ARCH_LIST", "CC", "CXX", "NVCC_CCBIN", "MAX_JOBS",
)
_MEMORY_POLL_S = 0.25


class ChildResult(BaseModel):
    """What came back from a child: its messages (in order), how it ended, and its log."""

    messages: list[dict] = Field(default_factory=list)
    returncode: int | None = None
    timed_out: bool = False
    memory_exceeded: bool = False
    wall_s: float = 0.0
    log_path: Path

    def last(self, event: str) -> dict | None:
        return next((m for m in reversed(self.messages) if m.get("event") == event), None)

    @property
    def stage(self) -> str:
        stage = self.last("stage")
        return stage["stage"] if stage else "startup"

    def log_tail(self, chars: int = 6000) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return text[-chars:]


def scrubbed_env(workdir: Path, build_dir: Path) -> dict[str, str]:
    env = {k: os.environ[k] for k in _KEEP_ENV if k in os.environ}
    env.update(
        HOME=str(workdir), TMPDIR=str(workdir), TORCH_EXTENSIONS_DIR=str(build_dir),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0",
    )
    return env


def _limit_resources(limits: Limits, cap_address_space: bool) -> None:
    """Runs in the child before exec. CUDA reserves huge virtual ranges, so RLIMIT_AS only for CPU runs."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if cap_address_space:
        cap = limits.memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def _read_messages(fd: int, sink: list[dict]) -> None:
    with os.fdopen(fd, "rb") as fh:
        for line in fh:
            try:
                sink.append(json.loads(line))
            except ValueError:
                sink.append({"event": "garbled", "text": line[:200].decode(errors="replace")})


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_child(request: dict, workdir: Path, build_dir: Path, limits: Limits, cap_address_space: bool) -> ChildResult:
    """Start `python -m evaluator.child`, send it the request on its pipe, wait with timeout and memory watch."""
    workdir.mkdir(parents=True, exist_ok=True)
    build_dir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "child.log"
    req_r, req_w = os.pipe()
    res_r, res_w = os.pipe()
    cmd = [sys.executable, "-m", "evaluator.child", str(req_r), str(res_w)]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd, cwd=workdir, env=scrubbed_env(workdir, build_dir), stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, pass_fds=(req_r, res_w), start_new_session=True,
            preexec_fn=lambda: _limit_resources(limits, cap_address_space),
        )
    os.close(req_r)
    os.close(res_w)
    with os.fdopen(req_w, "wb") as fh:
        fh.write(json.dumps(request).encode())
    result = ChildResult(log_path=log_path)
    reader = threading.Thread(target=_read_messages, args=(res_r, result.messages), daemon=True)
    reader.start()
    _wait(proc, limits, result)
    _kill_group(proc)  # compilers or threads the candidate left behind
    reader.join(timeout=5)
    return result


def _wait(proc: subprocess.Popen, limits: Limits, result: ChildResult) -> None:
    start = time.monotonic()
    while proc.poll() is None:
        if time.monotonic() - start > limits.timeout_s:
            result.timed_out = True
            break
        if _rss_bytes(proc.pid) > limits.memory_mb * 2**20:
            result.memory_exceeded = True
            break
        try:
            proc.wait(timeout=_MEMORY_POLL_S)
        except subprocess.TimeoutExpired:
            pass
    _kill_group(proc)
    result.returncode = proc.wait()
    result.wall_s = time.monotonic() - start
