"""The forward exchange: the shared memory through which trusted code has a forward server (a candidate's child, or
the problem's reference in a child of its own) run one call at a time, while trusted code makes its inputs, starts
the call, holds the clock and reads its outputs.

- `NAME.in`, one file per server, made by the parent in the comparer's exchange folder before the server starts:
  the inputs, written by the comparer only (the server maps it read-only: the jail lets it read this file and
  nothing else of the folder). Its head holds the word `go`, the layout's version and the file's size, then the
  layout (JSON); the inputs' bytes begin at DATA. The comparer writes `go` as the last act of a fill, while it
  holds the timing core (evaluator.parent.trusted_timing): nothing of the server runs between the inputs' first
  byte and `go`, and the parent's clock starts when it sees `go`.
- The server's control page (CTL_BYTES of its own memory): `armed`, `done` and the outputs' descriptions, which
  the parent reads through the kernel (evaluator.sandbox.memory). Nothing the server can write lies outside its
  own memory, so it can neither fill a disk nor resize a file another process maps; what it writes there is a
  claim the parent checks.
Only the standard library is imported: the parent's side needs no torch.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from pathlib import Path

CTL_BYTES = 4096
DATA = 1 << 16  # where the inputs' bytes begin in the .in file; its head and the layout's JSON lie before it
ALIGN = 4096  # each input starts on a page of its own, as a fresh large allocation would
MAX_OUTPUTS, MAX_DIMS = 16, 8
# words (u64 at these byte offsets) of the .in file's head, written by the comparer
GO, VERSION, SIZE, LAYOUT = 0, 8, 16, 24
_JSON = 64
# words of a server's control page, written by the server
ARMED, DONE, COUNT = 0, 8, 16
_OUTPUTS = 64
# data_ptr, dtype code, ndim, shape, strides (elements); on CUDA also the offset into its allocation and that
# allocation's IPC handle (evaluator.child.ipc), by which the comparer reads it
_RECORD = struct.Struct(f"<3q{MAX_DIMS}q{MAX_DIMS}qq64s")
_WORD = struct.Struct("<Q")
# dtype codes: the index in this list; -1 is an output that is not a plain tensor
DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
          "complex64", "complex128")
ITEMSIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2, "int8": 1,
            "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16}


def inputs_path(folder: Path, name: str) -> Path:
    return folder / f"{name}.in"


def create(folder: Path, name: str) -> Path:
    """The inputs file of one server, its head only, readable by the uid its children run as."""
    folder.mkdir(parents=True, exist_ok=True)
    path = inputs_path(folder, name)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        os.ftruncate(fd, DATA)
        os.fchmod(fd, 0o666)  # the comparer and the server may run as another uid; the jail is the wall
    finally:
        os.close(fd)
    return path


def map_file(path: Path, writable: bool) -> mmap.mmap:
    """The whole of a regular file, mapped shared; a path that is not one (a link, a FIFO) is refused."""
    fd = os.open(path, (os.O_RDWR if writable else os.O_RDONLY) | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not (info.st_mode & 0o170000 == 0o100000 and info.st_size):
            raise OSError(f"{path.name} is not a regular, non-empty file")
        return mmap.mmap(fd, info.st_size, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)
    finally:
        os.close(fd)


def word(page, at: int) -> int:
    return _WORD.unpack_from(page, at)[0]


def put(page: mmap.mmap, at: int, value: int) -> None:
    _WORD.pack_into(page, at, value)


class Output(tuple):
    """One output as its server described it: (data_ptr, dtype name or None, shape, strides in elements); `ipc`,
    on CUDA, the handle and offset another process opens it by (evaluator.child.ipc.Opened.open)."""

    ipc: dict | None = None

    @property
    def nbytes_span(self) -> int:
        """Bytes from its first element to the end of its last (its strides' reach)."""
        _, dtype, shape, strides = self
        if dtype is None or 0 in shape:
            return 0
        return (1 + sum((n - 1) * s for n, s in zip(shape, strides))) * ITEMSIZE[dtype]


def write_outputs(page: mmap.mmap, records: list[tuple]) -> None:
    """The server's side: its outputs' descriptions (data_ptr, dtype code, shape, strides[, offset, IPC handle]),
    at most MAX_OUTPUTS."""
    records = records[:MAX_OUTPUTS]
    for i, (ptr, code, shape, strides, *ipc) in enumerate(records):
        dims = len(shape) if len(shape) <= MAX_DIMS else -1
        pad = [0] * (MAX_DIMS - max(dims, 0))
        offset, handle = ipc or (0, b"")
        _RECORD.pack_into(page, _OUTPUTS + i * _RECORD.size, ptr, code, dims, *(list(shape)[:MAX_DIMS] + pad),
                          *(list(strides)[:MAX_DIMS] + pad), offset, handle)
    put(page, COUNT, len(records))


def read_outputs(page) -> list[Output]:
    """The trusted side's read of what a server wrote: every field checked (ValueError naming the misfit)."""
    count = word(page, COUNT)
    if count > MAX_OUTPUTS:
        raise ValueError(f"{count} outputs described (at most {MAX_OUTPUTS})")
    found = []
    for i in range(count):
        ptr, code, dims, *rest, offset, handle = _RECORD.unpack_from(page, _OUTPUTS + i * _RECORD.size)
        if code == -1:
            found.append(Output((0, None, (), ())))
            continue
        if not (0 <= code < len(DTYPES)) or not (0 <= dims <= MAX_DIMS) or ptr <= 0:
            raise ValueError(f"output {i} is described as dtype {code}, {dims} dims at {ptr:#x}")
        shape, strides = tuple(rest[:dims]), tuple(rest[MAX_DIMS:MAX_DIMS + dims])
        if any(n < 0 for n in shape) or any(s < 0 for s in strides):
            raise ValueError(f"output {i} is described with shape {shape} and strides {strides}")
        out = Output((ptr, DTYPES[code], shape, strides))
        if any(handle):
            out.ipc = {"handle": handle.hex(), "offset": offset}
        found.append(out)
    return found


def write_layout(page: mmap.mmap, layout: dict) -> None:
    """The comparer's side: the inputs' layout (offsets, shapes, dtypes; plain values) at the head of the .in file,
    under a new version, with the file's size: a server reloads its views only when either changed."""
    text = json.dumps(layout).encode()
    if _JSON + len(text) > DATA:
        raise ValueError(f"the inputs' layout takes {len(text):,} bytes, more than the {DATA - _JSON:,} it has")
    page[_JSON:_JSON + len(text)] = text
    put(page, LAYOUT, len(text))
    put(page, SIZE, len(page))
    put(page, VERSION, word(page, VERSION) + 1)


def read_layout(page: mmap.mmap) -> dict:
    size = word(page, LAYOUT)
    return json.loads(bytes(page[_JSON:_JSON + min(size, DATA - _JSON)]))
