"""The comparer's side of the forward exchanges on CUDA (evaluator.child.fills is the CPU's). Each server's inputs
lie in one device buffer of a memory pool of the comparer's own, which holds nothing else the server could reach
through its IPC handle; the server opens it once. The clock is the comparer's own timing stream, held at the head
of each call by a wait on a pinned host word until the server has queued its call and the parent said so (StopClock):

    hold(seq) -> L2 flush -> the call's inputs, from a seed only the comparer holds -> start -> `go`
        ... the server's stream: wait(`go`) -> its call -> `done` ...
    wait(`done`) -> the lattice read of each output -> end -> (a snapshot, if the parent asked for one)

`go` and `done` are interprocess events. No host time of either process lies inside the window, no work of the
server's stream can start on the inputs before `go`, and work it leaves for after `done` misses the lattice read,
which the whole snapshot taken later then disagrees with (comparer.late). Both sides, the candidate's server and
its reference's, are timed through the same steps."""

from __future__ import annotations

import ctypes
import functools
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
_WAIT_EQ = 0x1  # CU_STREAM_WAIT_VALUE_EQ
_WORD = 1 << 31  # the host word is an int32: sequence numbers wrap below it
_MAPPED = 16  # outputs' allocations a server's exchange keeps open at once (a server reuses its own blocks)


@functools.cache
def _driver() -> ctypes.CDLL:
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuStreamWaitValue32_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
    lib.cuMemHostGetDevicePointer_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p, ctypes.c_uint]
    return lib


def _check(rc: int, what: str) -> None:
    if rc:
        raise ipc.IpcError(f"{what} failed (CUDA driver error {rc})")


class Gate:
    """A pinned host word a stream waits on: `hold` queues the wait for `seq`, `open` lets the stream past it.
    The wait is the stream's front end reading host memory: it takes no SM from anyone."""

    def __init__(self):
        self.word = torch.zeros(1, dtype=torch.int32, pin_memory=True)
        device_ptr = ctypes.c_uint64()
        _check(_driver().cuMemHostGetDevicePointer_v2(ctypes.byref(device_ptr), ctypes.c_void_p(self.word.data_ptr()), 0),
               "cuMemHostGetDevicePointer")
        self.device_ptr = device_ptr.value

    def hold(self, stream: torch.cuda.Stream, seq: int) -> None:
        _check(_driver().cuStreamWaitValue32_v2(ctypes.c_void_p(stream.cuda_stream), self.device_ptr, seq % _WORD,
                                                _WAIT_EQ), "cuStreamWaitValue32")

    def open(self, seq: int) -> None:
        self.word[0] = seq % _WORD


class _Mapped:
    """The allocations a server's outputs lie in, opened in this process once each and kept open (a server reuses
    its caching allocator's blocks call after call), bounds-checked for every output read through them."""

    def __init__(self):
        self.opened = ipc.Opened()

    def view(self, meta: dict) -> torch.Tensor | None:
        """The output a meta describes (dtype, shape, strides in elements, its span's bytes, its IPC place)."""
        where = meta.get("ipc")
        if not isinstance(where, dict) or meta.get("dtype") is None:
            return None
        dtype = getattr(torch, meta["dtype"])
        if self.opened.count() >= _MAPPED and not self.opened.holds(where):
            self.opened.close()
        raw = self.opened.open(where, int(meta["span"]), dtype.itemsize)
        return _T.as_strided(raw.view(dtype), meta["shape"], meta["strides"])

    def close(self) -> None:
        self.opened.close()


class _Served:
    """One server's exchange as the comparer holds it: its .in file's head, its inputs' buffer, events, gate."""

    def __init__(self, path: Path):
        self.page = exchange.map_file(path, writable=True)
        self.pool = torch.cuda.MemPool()  # the inputs' buffer alone: its IPC handle reaches nothing else
        self.views: list | None = None
        self.go, self.done = torch.cuda.Event(interprocess=True), torch.cuda.Event(interprocess=True)
        for event in (self.go, self.done):
            event.record()  # made now, so its handle exists before the server opens it
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
            served.go.record(self.stream)
        exchange.put(served.page, exchange.GO, seq)

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
                   "events": {"go": served.go.ipc_handle().hex(), "done": served.done.ipc_handle().hex()}}
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
            self.stream = torch.cuda.Stream()  # that one waits on the server's `done` for good: later calls go on
            return Clocked(error=f"the call did not end on the GPU within {request.within_s:.0f} s")
        if request.keep:
            self._keep(served, request.label, got, provisional=request.keep == "last")
        seen = [None if lat is None else {"start": lat[0], "step": list(lat[1]), "bytes": lat[2].cpu().numpy().tobytes().hex()}
                for lat in lattices]
        return Clocked(ms=served.start.elapsed_time(end), seen=seen)

    def _tail(self, served: _Served, request: StopClock) -> tuple[list, list, torch.cuda.Event]:
        """Queued behind the held head: wait for `done`, read each output's lattice, stop the clock."""
        got, lattices = [], []
        with torch.cuda.stream(self.stream):
            self.stream.wait_event(served.done)
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
