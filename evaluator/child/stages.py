"""What both timed roles of a child do alike (the candidate and the reference): the result channel, the timed
call, the timing stage and its messages, the device-memory report, and a message the parent answers."""

from __future__ import annotations

import os
import sys

import torch

from evaluator.child import timing, trials
from evaluator.protocol import CandidateRequest, Memory, Message, ReferenceRequest, Stage, Timing
from evaluator.child import leaks


class Channel:
    """The private result pipe. JSON lines; the parent ignores anything the child prints."""

    def __init__(self, fd: int):
        self._fh = os.fdopen(fd, "w", buffering=1)

    def send(self, message: Message) -> None:
        self._fh.write(message.model_dump_json(fallback=str) + "\n")

def sync(device: str):
    return torch.cuda.synchronize if device == "cuda" else (lambda: None)

def timed_call(call):
    """The timed call as both sides make it: right after the model returns, still inside the timed window, any
    profile or trace hook is cleared. One left by forward() would run candidate code between the timer's stop
    and the snapshot, doing then the work the call skipped (tests/adversarial/relu/profile_hook.py: `correct`
    at 34x its honest kernel). Work a thread queues after the timer is shut out by what the window reads of
    the outputs (timing.touch, timing.glimpse)."""
    def timed():
        out = call()
        sys.setprofile(None)
        sys.settrace(None)
        return out
    return timed

def bench_model(call, req: CandidateRequest | ReferenceRequest, **hooks) -> list[float]:
    t = req.timing
    with torch.no_grad():
        return timing.bench(call, req.device, t.warmup_ms, t.rep_ms, t.min_reps, t.max_reps, rel_ci=t.rel_ci, **hooks)

def time_model(chan: Channel, req: CandidateRequest | ReferenceRequest, call, fresh: trials.FreshInputs, **hooks) -> None:
    """Times the model on fresh inputs; the parent clocks the timed loop from the `timed` stage message to the
    samples."""
    chan.send(Stage(stage="timing"))
    untimed: list[int] = []

    def mark(calls: int) -> None:
        untimed.append(calls)
        chan.send(Stage(stage="timed"))

    samples = bench_model(call, req, mark=mark, fresh=fresh, **hooks)
    chan.send(Timing(which="model", samples=samples, untimed_calls=untimed[0], fresh_inputs=fresh.policy(),
                     fill_s=fresh.timed_fill_s))

def send_memory(chan: Channel, device: str) -> None:
    if device == "cuda":
        chan.send(Memory(peak_cuda_allocated=torch.cuda.max_memory_allocated(), host_rss=leaks.rss()))

def ask_parent(chan: Channel, requests, message: Message, doing: str) -> bytes:
    """Send a message the parent answers, and wait for its answer line."""
    chan.send(message)
    line = requests.readline()
    if not line:
        raise RuntimeError(f"kforge stopped answering while {doing}")
    return line
