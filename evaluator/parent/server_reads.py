"""How trusted code reads a forward server (evaluator.child.forward_server) from outside it: its control page's
words and its outputs' descriptions through the kernel (evaluator.sandbox.memory), the lattice a glimpse reads
(drawn by the parent, never told to the server), and, on CPU, the outputs' bytes themselves."""

from __future__ import annotations

import ctypes
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from evaluator import exchange
from evaluator.sandbox import memory
from evaluator.timing_method import lattice_steps

POLL = 1 << 12  # spins between looks at the clock and at the server's life


class Stalled(Exception):
    """A server did not answer in time, or is gone: its child's own end says why."""


@dataclass
class Plan:
    """Where a glimpse of one output will read: its lattice's starts (drawn by the parent), steps and offsets."""

    key: tuple
    start: list[int]
    step: tuple[int, ...]
    offsets: torch.Tensor  # bytes from the output's first element, in the lattice's order


def plan_of(dtype: str, shape: tuple, strides: tuple, coin: random.SystemRandom) -> Plan:
    step = lattice_steps(tuple(shape))
    start = [coin.randrange(s) for s in step]
    item = exchange.ITEMSIZE[dtype]
    offsets = torch.zeros((), dtype=torch.int64)
    for a, b, n, s in zip(start, step, shape, strides):
        axis = (a + torch.arange(-((a - n) // b), dtype=torch.int64) * b) * s * item
        offsets = offsets.unsqueeze(-1) + axis
    return Plan((dtype, tuple(shape), tuple(strides)), start, step, offsets.reshape(-1))


def seen_at(pid: int, out: exchange.Output, plan: Plan) -> dict:
    """The lattice's bytes of one output, read now from the server's memory (one call, up to IOV_MAX pieces each)."""
    item, count = exchange.ITEMSIZE[out[1]], plan.offsets.numel()
    remote = (memory.Iovec * count)()
    table = torch.frombuffer(remote, dtype=torch.int64).view(count, 2)
    table[:, 0] = plan.offsets + out[0]
    table[:, 1] = item
    got = bytearray(count * item)
    if count and memory.read_pieces(pid, remote, count, ctypes.addressof((ctypes.c_char * len(got)).from_buffer(got))) != len(got):
        raise memory.Unreadable(0, "part of an output's glimpse could not be read")
    return {"start": plan.start, "step": list(plan.step), "bytes": got.hex()}


def meta_of(out: exchange.Output, device: str = "cpu") -> dict:
    """An output as the comparer's structural check reads it."""
    if out[1] is None:
        return {"type": f"not a plain {device.upper()} tensor", "exact_tensor": False}
    return {"type": "Tensor", "exact_tensor": True, "shape": list(out[2]), "dtype": f"torch.{out[1]}", "device": device}


def place_of(out: exchange.Output) -> dict:
    """Where the comparer opens a CUDA output (evaluator.child.cuda_fills): its layout and IPC handle."""
    return {"dtype": out[1], "shape": list(out[2]), "strides": list(out[3]), "span": out.nbytes_span, "ipc": out.ipc}


def snapshot(pid: int, outputs: list[exchange.Output]) -> bytes:
    """The plain outputs' elements, read from the server's memory, as contiguous raw bytes back to back."""
    parts = []
    for out in outputs:
        ptr, dtype, shape, strides = out
        if dtype is None or not out.nbytes_span:
            continue
        raw = memory.read_range(pid, ptr, out.nbytes_span)
        flat = torch.frombuffer(raw, dtype=getattr(torch, dtype))
        dense = flat.as_strided(shape, strides).contiguous()
        parts.append(ctypes.string_at(dense.data_ptr(), dense.numel() * dense.element_size()))
    return b"".join(parts)


class Ring:
    """One forward server as the parent rings it: its control page in its memory, its inputs file's `go`."""

    def __init__(self, child, inputs: Path, alive, deadline: float):
        control = int(child.result.last("serving")["control"])
        self.child, self.pid, self.control = child, memory.server_pid(child.proc.pid), control
        self.armed, self.done = memory.Word(self.pid, control + exchange.ARMED), memory.Word(self.pid, control + exchange.DONE)
        self.inputs, self.alive, self.deadline, self.seq = exchange.map_file(inputs, writable=False), alive, deadline, 0

    def wait(self, look, seq: int, patience_s: float | None = None) -> bool:
        """Until `look()` reads `seq`: True; False once `patience_s` passed first (None: no patience, only the
        candidate's deadline, which raises)."""
        spins, until = 0, None if patience_s is None else time.monotonic() + patience_s
        while look() != seq:
            spins += 1
            if spins % POLL == 0:
                now = time.monotonic()
                if now > self.deadline or not self.alive():
                    raise Stalled(f"the forward server did not answer call {seq}")
                if until is not None and now > until:
                    return False
        return True

    def went(self) -> int:
        return exchange.word(self.inputs, exchange.GO)

    def outputs(self) -> list[exchange.Output]:
        return exchange.read_outputs(memory.read_range(self.pid, self.control, exchange.CTL_BYTES))
