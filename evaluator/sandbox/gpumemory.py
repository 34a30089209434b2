"""The device memory a candidate's own processes hold, read by the parent through NVML.

A leak check that reads the device's used memory also counts every other process on the GPU: other submitters,
the problem's comparer, children making their CUDA contexts while they wait. On the H100 that judged honest
candidates `leak` (+524 to +646 MiB per 10 calls among eight submitters; +74 MiB beside early contexts, benchmarks/concurrent_submit.py).
NVML's per-process accounting counts what the driver gave each process (raw cudaMalloc included, which torch's
allocator statistics miss); the parent keeps the processes that descend from the child it started, so nothing
the candidate says about itself enters the number.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import pynvml

from evaluator.protocol import Ack

MARKS = 3  # before the first window of the leak check, between the two, after the second (evaluator/child/leaks.py)


@functools.cache
def unavailable() -> str:
    """Why NVML cannot be read on this host ('' when it can)."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return f"NVML: {exc}"
    return ""


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])  # the name, in parentheses, may hold spaces


def _descends(pid: int, root: int) -> bool:
    """Whether `pid` is `root` or below it (host pids: a candidate's orphans are adopted inside its PID namespace,
    whose first process is below the jail's outer process, so none climbs out of the tree)."""
    try:
        while pid > 1:
            if pid == root:
                return True
            pid = _parent(pid)
    except (OSError, IndexError, ValueError):
        return False
    return False


def _handle(gpu: str):
    """The NVML device a child was pinned to: its UUID, or its index (children order devices by PCI bus, as NVML
    does: sandbox.scrubbed_env)."""
    if gpu.startswith(("GPU-", "MIG-")):
        return pynvml.nvmlDeviceGetHandleByUUID(gpu)
    return pynvml.nvmlDeviceGetHandleByIndex(int(gpu))


def used_by(gpu: str, root: int) -> int | str:
    """Bytes of `gpu` held by process `root` and its descendants, or why they cannot be read."""
    if why := unavailable():
        return why
    try:
        running = pynvml.nvmlDeviceGetComputeRunningProcesses(_handle(gpu))
    except (pynvml.NVMLError, ValueError) as exc:
        return f"NVML on GPU {gpu}: {exc}"
    mine = [p for p in running if _descends(p.pid, root)]
    if not mine:  # asked at a mark, after the child ran calls on this GPU: it has a context there
        return f"NVML lists no process of the child on GPU {gpu} (its pids are another PID namespace's?)"
    if any(p.usedGpuMemory is None for p in mine):
        return f"NVML does not account memory per process on GPU {gpu}"
    return sum(p.usedGpuMemory for p in mine)


def room(gpu: str, share: float) -> int:
    """Bytes a new process may take on `gpu` while everything in use there (every process's, NVML's count) stays
    within `share` of its memory; 0 where NVML cannot say."""
    if unavailable():
        return 0
    try:
        info = pynvml.nvmlDeviceGetMemoryInfo(_handle(gpu))
    except (pynvml.NVMLError, ValueError):
        return 0
    return max(0, int(share * info.total) - int(info.used))


@dataclass
class ProcessMemory:
    """The parent's side of a candidate's leak check on a GPU: at each mark the child stops and asks, the parent
    reads its processes' device memory, and answers. `gpu` and `root` are asked at the mark (the device comes
    with the candidate's request)."""

    gpu: object  # () -> the device the child holds, or None on CPU
    root: int
    asked: int = 0  # marks the child asked for: the harness asks MARKS times, a candidate that skips some forged it
    readings: list[int] = field(default_factory=list)
    why: str = ""  # a reading that could not be made

    def __call__(self, message: dict) -> Ack:
        self.asked += 1
        gpu = self.gpu()
        found = used_by(gpu, self.root) if gpu is not None else "no GPU"
        if isinstance(found, str):
            self.why = self.why or found
        else:
            self.readings.append(found)
        return Ack(ack=f"mark {message.get('which')}")

    def growth(self) -> tuple[int, int] | str:
        """Growth over the two windows, or why the parent has none."""
        if self.why or len(self.readings) != MARKS:
            return self.why or f"{len(self.readings)} of the leak check's {MARKS} marks were read"
        first, middle, last = self.readings
        return middle - first, last - middle
