"""The comparer's side of the forward exchanges (evaluator.exchange): it makes every timed call's inputs, for each
candidate and its reference's server, from seeds only it holds, writes them into that server's .in file just
before the call and then says `go` there. A candidate's process never holds a seed, a future input or the
problem's input function's output before its call: a result precomputed at import has nothing to be computed
from, and while the comparer fills it holds the timing core (evaluator.parent.trusted_timing), so nothing of
the server's can start on the inputs before `go`."""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from types import ModuleType

import torch

from evaluator import exchange
from evaluator.child import timing, trials

_T = torch._C.TensorBase


def layout_of(inputs: list, base: int = exchange.DATA) -> dict:
    """Where each input goes (page-aligned offsets from `base`: in the .in file, from exchange.DATA; in a CUDA
    buffer, from 0), or its plain value."""
    at, items = base, []
    for value in inputs:
        if not isinstance(value, torch.Tensor):
            items.append({"value": value})
            continue
        nbytes = _T.numel(value) * _T.element_size(value)
        items.append({"offset": at, "shape": list(_T.size(value)), "dtype": str(_T.dtype.__get__(value)).removeprefix("torch.")})
        at += -(-nbytes // exchange.ALIGN) * exchange.ALIGN
    return {"inputs": items, "size": at}


class _In:
    """One server's .in file as the comparer writes it."""

    def __init__(self, path: Path):
        self.path, self.page, self.size = path, None, 0

    def fit(self, size: int) -> mmap.mmap:
        """Mapped at `size` bytes at least; grown only where a call's inputs need more (a server remaps then)."""
        if self.page is None or size > self.size:
            fd = os.open(self.path, os.O_RDWR | os.O_NOFOLLOW)
            try:
                self.size = max(size, os.fstat(fd).st_size)
                os.ftruncate(fd, self.size)
                self.page = mmap.mmap(fd, self.size, access=mmap.ACCESS_WRITE)
            finally:
                os.close(fd)
        return self.page


class Fills:
    """Fills the exchanges of the comparer's folder: `fill(name, label, seq)` writes call `label`'s inputs into
    exchange `name` (CPU: after writing twice the largest cache, as every timed call starts cold), then says go
    for call `seq`."""

    def __init__(self, folder: Path, problem: ModuleType, seed_of, device: str):
        self.folder, self.problem, self.seed_of, self.device = folder, problem, seed_of, device
        self.files: dict[str, _In] = {}
        self.views: dict[str, list] = {}  # per exchange: its inputs as tensors over its file, written in place
        self._scrub = timing.cpu_flush_buffer() if device == "cpu" else None

    def fill(self, name: str, label: str, seq: int) -> None:
        self._write(name, label)
        exchange.put(self.files[name].page, exchange.GO, seq)

    def _write(self, name: str, label: str) -> None:
        """The caches written over first, then the inputs made straight into the file's views where the problem
        allows (trials.refill): no temporaries are freed on this side, whose reuse by the reference's output
        would be hot in cache where a candidate's is not (an identical candidate timed 0.75-0.85x that way)."""
        if not name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"no exchange is named {name!r}")
        if self._scrub is not None:
            _T.add_(self._scrub, 1)
        seed, views = self.seed_of(label), self.views.get(name)
        if views is not None:
            fresh = list(views)
            trials.refill(fresh, self.problem, seed, self.device)
            if all(a is b for a, b in zip(fresh, views)):
                return  # written in place: the layout stands
            self._place(name, fresh)
        else:
            self._place(name, trials.make_inputs(self.problem, seed, self.device))

    def _place(self, name: str, inputs: list) -> None:
        """Lay the inputs out in the server's .in file (grown if needed), copy them there, and keep views of them."""
        layout = layout_of(inputs)
        if name not in self.files:
            self.files[name] = _In(exchange.inputs_path(self.folder, name))
        page, views = self.files[name].fit(layout["size"]), []
        for item, value in zip(layout["inputs"], inputs):
            if "offset" not in item:
                views.append(value)
                continue
            view = torch.frombuffer(page, dtype=_T.dtype.__get__(value), count=_T.numel(value), offset=item["offset"]) \
                if _T.numel(value) else torch.empty(0, dtype=_T.dtype.__get__(value))
            _T.copy_(view, _T.reshape(value, (-1,)))
            views.append(_T.view(view, item["shape"]))
        exchange.write_layout(page, layout)
        self.views[name] = views
