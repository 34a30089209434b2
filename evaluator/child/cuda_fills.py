"""The comparer's side of the forward exchanges on CUDA (evaluator.child.fills is the CPU's). Each server's inputs
lie in one device buffer of a memory pool of the comparer's own, which holds nothing else the server could reach
through its IPC handle; the server opens it once. The clock is the comparer's own timing stream, held at the head
of each call by a wait on a pinned host word until the server has queued its call and the parent said so (StopClock):

    hold(seq) -> L2 flush -> the call's inputs, from a seed only the comparer holds -> start -> `go`
        ... the server's stream: wait(`go`) -> its call -> `done` ...
    wait(`done`) -> the lattice read of each output -> end -> (a snapshot, if the parent asked for one)

`go` and `done` are words in a device allocation of the comparer's pool that the server opens by IPC
(ipc.wait_word, ipc.write_word). No host time of either process lies inside the window, no work of the server's
stream can start on the inputs before `go`, and work it leaves for after `done` misses the lattice read, which
the whole snapshot taken later then disagrees with (comparer.late). Both sides, the candidate's server and its
reference's, are timed through the same steps. A server whose call cannot be queued while the head is held (its
forward waits for the GPU) is let run by `release`: its window then holds its host's time too."""

from __future__ import annotations

import time
from pathlib import Path
from types import ModuleType

import torch

from evaluator import exchange
from evaluator.child import ipc, timing, trials
from evaluator.child.fills import layout_of
from evaluator.protocol import StopClock, Clocked
from evaluator.timing_method import lattice_steps

_T = torch._C.TensorBase
_MAPPED = 16  # outputs' allocations a server's exchange keeps open at once (a server reuses its own blocks)


class Gate:
    """A pinned host word a stream waits on: `hold` queues the wait for `seq`, `open` lets the stream past it."""

    def __init__(self):
        self.word = torch.zeros(1, dtype=torch.int32, pin_memory=True)
        self.device_ptr = ipc.host_word(self.word.data_ptr())

    def hold(self, stream: torch.cuda.Stream, seq: int) -> None:
        ipc.wait_word(stream.cuda_stream, self.device_ptr, seq)

    def open(self, seq: int) -> None:
        self.word[0] = seq % ipc.WORD


class _Mapped:
    """The allocations a server's outputs lie in, opened in this process once each and kept open (a server reuses
    its caching allocator's blocks call after call), bounds-checked for every output read through them."""

    def __init__(self):
        self.opened, self.retired = ipc.Opened(), []

    def view(self, meta: dict) -> torch.Tensor | None:
        """The output a meta describes (dtype, shape, strides in elements, its span's bytes, its IPC place). Once
        _MAPPED are open, a new set is begun and the full one retired: it is closed once the stream is past its
        reads (`release`), as closing synchronizes the device, whose held stream waits for this very call."""
        where = meta.get("ipc")
        if not isinstance(where, dict) or meta.get("dtype") is None:
            return None
        dtype = getattr(torch, meta["dtype"])
        if self.opened.count() >= _MAPPED and not self.opened.holds(where):
            self.retired.append(self.opened)
            self.opened = ipc.Opened()
        raw = self.opened.open(where, int(meta["span"]), dtype.itemsize)
        return _T.as_strided(raw.view(dtype), meta["shape"], meta["strides"])

    def release(self) -> None:
        """The retired sets closed (the stream that read through them has ended those reads)."""
        while self.retired:
            self.retired.pop().close()

    def close(self) -> None:
        self.release()
        self.opened.close()


class _Served:
    """One server's exchange as the comparer holds it: its .in file's head, its inputs' buffer, words, gate."""

    def __init__(self, path: Path):
        self.page = exchange.map_file(path, writable=True)
        self.pool = torch.cuda.MemPool()  # the inputs' buffer and the words alone: their IPC handles reach nothing else
        self.views: list | None = None
        with torch.cuda.use_mem_pool(self.pool):
            self.words = torch.zeros(2, dtype=torch.int32, device="cuda")  # `go`, `done`: sequence numbers
        self.go, self.done = self.words.data_ptr(), self.words.data_ptr() + 4
        self.gate, self.start, self.mapped, self.buffer = Gate(), None, _Mapped(), None
        self.kept: dict[str, list] = {}  # label -> a snapshot of that call's outputs
        self.last: str | None = None  # the label whose snapshot stands only until the next call's


class CudaFills:
    """Fills the CUDA exchanges of the comparer's folder and clocks their calls: `fill(name, label, seq)` queues
    a call's held head (flush, inputs, start, go) and says go in the .in file; `stop_clock(request)` queues its tail
    once the server queued the call, lets the head run, and answers with the call's milliseconds and reads."""

    def __init__(self, folder: Path, problem: ModuleType, seed_of, device: str):
        self.folder, self.problem, self.seed_of = folder, problem, seed_of
        self.stream = torch.cuda.Stream()
        self.flush = timing.flush_buffer("cuda")
        self.served: dict[str, _Served] = {}
        torch.cuda.synchronize()

    def fill(self, name: str, label: str, seq: int) -> None:
        served = self._served(name)
        with torch.cuda.stream(self.stream):
            served.gate.hold(self.stream, seq)
            _T.zero_(self.flush)
            self._write(name, served, label)
            served.start = torch.cuda.Event(enable_timing=True)
            served.start.record(self.stream)
            ipc.write_word(self.stream.cuda_stream, served.go, seq)
        exchange.put(served.page, exchange.GO, seq)

    def release(self, name: str, seq: int) -> None:
        """Call `seq` of exchange `name` runs now, before its server queued it: a server whose forward waits for
        the GPU (a synchronize, or more launches than the stream's queue takes) waits for this head."""
        served = self.served.get(name)
        if served is not None:
            served.gate.open(seq)

    def _served(self, name: str) -> _Served:
        if not name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"no exchange is named {name!r}")
        if name not in self.served:
            self.served[name] = _Served(exchange.inputs_path(self.folder, name))
        return self.served[name]

    def _write(self, name: str, served: _Served, label: str) -> None:
        """The inputs made straight into the buffer's views where the problem allows (trials.refill), else laid
        out afresh in a new buffer, which the server opens at `go` (its layout's version changed)."""
        seed = self.seed_of(label)
        if served.views is not None:
            fresh = list(served.views)
            trials.refill(fresh, self.problem, seed, "cuda")
            if all(a is b for a, b in zip(fresh, served.views)):
                return
        else:
            fresh = trials.make_inputs(self.problem, seed, "cuda")
        layout = layout_of(fresh, 0)
        with torch.cuda.use_mem_pool(served.pool):
            buffer = torch.empty(max(layout["size"], 1), dtype=torch.uint8, device="cuda")
        views = []
        for item, value in zip(layout["inputs"], fresh):
            if "offset" not in item:
                views.append(value)
                continue
            nbytes = _T.numel(value) * _T.element_size(value)
            view = buffer[item["offset"]:item["offset"] + nbytes].view(_T.dtype.__get__(value))
            _T.copy_(view, _T.reshape(value, (-1,)))
            views.append(view.view(item["shape"]))
        layout |= {"device": "cuda", "buffer": ipc.export(buffer.data_ptr()), "bytes": int(buffer.numel()),
                   "words": ipc.export(served.words.data_ptr())}
        exchange.write_layout(served.page, layout)
        served.views, served.buffer = views, buffer

    def stop_clock(self, request: StopClock) -> Clocked:
        served = self.served.get(request.name)
        if served is None:
            return Clocked(error=f"no exchange {request.name!r} was filled")
        if request.abort or served.start is None:
            served.gate.open(request.seq)
            return Clocked(error="the server did not queue the call")
        try:
            got, lattices, end = self._tail(served, request)
        except (ipc.IpcError, RuntimeError, ValueError, TypeError, KeyError) as exc:  # described by the server: a claim
            return Clocked(error=f"its outputs cannot be read as described: {type(exc).__name__}: {str(exc)[:200]}")
        finally:
            served.gate.open(request.seq)  # the held head runs now, the tail behind it
        if not _finished(end, time.monotonic() + request.within_s):
            ipc.write_word(torch.cuda.Stream().cuda_stream, served.done, request.seq)  # the stream past its wait
            return Clocked(error=f"the call did not end on the GPU within {request.within_s:.0f} s")
        served.mapped.release()
        if request.keep:
            self._keep(served, request.label, got, provisional=request.keep == "last")
        seen = [None if lat is None else {"start": lat[0], "step": list(lat[1]), "bytes": lat[2].cpu().numpy().tobytes().hex()}
                for lat in lattices]
        return Clocked(ms=served.start.elapsed_time(end), seen=seen)

    def _tail(self, served: _Served, request: StopClock) -> tuple[list, list, torch.cuda.Event]:
        """Queued behind the held head: wait for `done`, read each output's lattice, stop the clock."""
        got, lattices = [], []
        with torch.cuda.stream(self.stream):
            ipc.wait_word(self.stream.cuda_stream, served.done, request.seq)
            for meta, start in zip(request.outputs, request.starts):
                t = served.mapped.view(meta)
                got.append(t)
                if t is None or start is None or not _T.numel(t):
                    lattices.append(None)
                    continue
                step = lattice_steps(tuple(_T.size(t)))
                lattices.append((start, step, _T.clone(timing.lattice_of(t, start, step), memory_format=torch.contiguous_format).view(torch.uint8)))
            end = torch.cuda.Event(enable_timing=True)
            end.record(self.stream)
        return got, lattices, end

    def _keep(self, served: _Served, label: str, got: list, provisional: bool) -> None:
        """A whole snapshot of the call's outputs, after the window; a provisional one (a round's last call, which
        is compared only if it is the last of all) stands only until the next."""
        if served.last is not None:
            served.kept.pop(served.last, None)
            served.last = None
        with torch.cuda.stream(self.stream):
            served.kept[label] = [None if t is None else _T.clone(t) for t in got]
        self.stream.synchronize()
        if provisional:
            served.last = label

    def take(self, name: str, label: str) -> list:
        """The snapshot kept of call `label` of exchange `name` (gone from here once taken)."""
        served = self.served.get(name)
        if served is None or label not in served.kept:
            raise KeyError(f"no snapshot of {label!r} was kept for {name!r}")
        if served.last == label:
            served.last = None
        return served.kept.pop(label)

    def forget(self, name: str) -> None:
        """The exchange's last use: its buffers, events and mappings let go."""
        served = self.served.pop(name, None)
        if served is not None:
            torch.cuda.synchronize()
            served.mapped.close()


def _finished(event: torch.cuda.Event, deadline: float) -> bool:
    while not event.query():
        if time.monotonic() > deadline:
            return False
        time.sleep(2e-5)
    return True
