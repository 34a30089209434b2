"""A forward server: the one thing a timed child does with its model once the trusted side times it. Each call is
rung by the parent (evaluator.parent.trusted_timing) over the exchange (evaluator.exchange): the inputs are the
comparer's, mapped read-only; the server says it is armed in its control page, waits for the comparer's `go` in
the inputs' file, calls the model, describes where its outputs lie and says `done`. The clock is the parent's, the control page and
the outputs are read by the parent from this process's memory, and which calls are compared is drawn by the parent
after each one: nothing here is believed. The same code serves the problem's reference in a child of its own
(the `serve` role), so both sides are timed through the same steps, each in a process that did not fill its inputs.
On CUDA the inputs lie in the comparer's device buffer, opened by IPC handle, and the call is queued between the
comparer's words: its stream waits for `go` and writes `done` (evaluator.child.cuda_fills)."""

from __future__ import annotations

import ctypes
import mmap
import warnings
from pathlib import Path

import torch

from evaluator import exchange
from evaluator.child import ipc, trials
from evaluator.protocol import Arm, Serving

_T = torch._C.TensorBase


def _views(page, layout: dict, buffer: torch.Tensor | None) -> list:
    """The inputs as the layout places them: in the mapped .in file (CPU), or in the comparer's device buffer
    (CUDA, `buffer`); plain values as they are."""
    made = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the buffer is read-only: the inputs are not this process's to write
        for item in layout["inputs"]:
            if "value" in item:
                made.append(item["value"])
                continue
            dtype = getattr(torch, item["dtype"])
            count = 1
            for n in item["shape"]:
                count *= n
            if not count:
                flat = torch.empty(0, dtype=dtype, device="cpu" if buffer is None else "cuda")
            elif buffer is None:
                flat = torch.frombuffer(page, dtype=dtype, count=count, offset=item["offset"])
            else:
                flat = buffer[item["offset"]:item["offset"] + count * dtype.itemsize].view(dtype)
            made.append(flat.view(item["shape"]))
    return made


def _describe(tensors: list, device: str) -> list[tuple]:
    """Each output's place (data_ptr, dtype code, shape, strides; on CUDA also where the comparer opens it)."""
    records = []
    for t in tensors:
        if type(t) is not torch.Tensor or _T.device.__get__(t).type != device:
            records.append((0, -1, [], []))
            continue
        name = str(_T.dtype.__get__(t)).removeprefix("torch.")
        code = exchange.DTYPES.index(name) if name in exchange.DTYPES else -1
        record = (_T.data_ptr(t), code, list(_T.size(t)), list(_T.stride(t)))
        if device == "cuda" and _T.numel(t):
            try:
                where = ipc.export(_T.data_ptr(t))
            except ipc.IpcError:  # not memory of this process's own (an input's view): no plain output
                records.append((0, -1, [], []))
                continue
            record += (where["offset"], bytes.fromhex(where["handle"]))
        records.append(record)
    return records


class Server:
    """The server's end of one exchange: `arm(seq)` says it is armed for call `seq` and runs it at the comparer's
    go."""

    def __init__(self, inp: Path, call):
        self.ctl = mmap.mmap(-1, exchange.CTL_BYTES)  # its control page, in its own memory (evaluator.exchange)
        self.address = ctypes.addressof(ctypes.c_char.from_buffer(self.ctl))
        self.inp_path, self.call = inp, call
        self.page, self.version, self.inputs = exchange.map_file(inp, writable=False), -1, []
        self.kept = None  # the last call's outputs, alive until the next call: the parent reads them meanwhile
        self.device, self.opened, self.words = "cpu", None, None  # CUDA: the comparer's buffer, its words' address

    def _load(self) -> None:
        """The inputs' views, made again only where the comparer's layout changed (a problem whose shapes change
        with the seed) or the file grew: two reads of its head otherwise."""
        page = self.page
        if exchange.word(page, exchange.SIZE) != len(page):
            self.page = page = exchange.map_file(self.inp_path, writable=False)
        version = exchange.word(page, exchange.VERSION)
        if version != self.version:
            layout = exchange.read_layout(page)
            self.version, self.inputs = version, _views(page, layout, self._cuda(layout))

    def _cuda(self, layout: dict) -> torch.Tensor | None:
        """On CUDA, the comparer's input buffer (opened anew: its layout changed) and its `go` and `done` words."""
        if layout.get("device") != "cuda":
            return None
        if self.opened is not None:
            self.opened.close()
        self.device, self.opened = "cuda", ipc.Opened()
        self.words = self.opened.open(layout["words"], 8, 4).data_ptr()
        return self.opened.open(layout["buffer"], int(layout["bytes"]), 512)  # the caching allocator's alignment

    def arm(self, seq: int, empty: bool = False) -> None:
        self.kept = None
        page, ctl = self.page, self.ctl
        exchange.put(ctl, exchange.ARMED, seq)
        while exchange.word(page, exchange.GO) != seq:
            pass
        self._load()
        stream = torch.cuda.current_stream().cuda_stream if self.words is not None else None
        if stream is not None:
            ipc.wait_word(stream, self.words, seq)  # `go`
        out = None if empty else self.call(self.inputs)
        if stream is not None:
            ipc.write_word(stream, self.words + 4, seq)  # `done`
        tensors = trials.as_tensors(out)
        exchange.write_outputs(ctl, _describe(tensors, self.device))
        exchange.put(ctl, exchange.DONE, seq)
        self.kept = out


def serve(chan, requests, server: Server) -> None:
    """Say where its control page lies, then serve Arm lines (`{"arm": seq}`) until an `{"end": true}` line or
    the end of the pipe."""
    chan.send(Serving(control=server.address))
    for line in requests:
        message = Arm.model_validate_json(line)
        if message.end:
            return
        with torch.no_grad():
            server.arm(message.arm, message.empty)

