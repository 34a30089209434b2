"""CUDA IPC through the driver API: a candidate hands the trusted comparer its output memory, never a copy.

The candidate's side exports the allocation that holds an output (a legacy IPC handle plus an offset); the
comparer opens it read-only in its own context, after checking with the driver that the bytes it will read lie
inside that allocation (a forged size would otherwise read out of bounds and kill the comparer's CUDA context).
PyTorch's own IPC path is not used: it makes the receiver write a reference counter into a shared-memory file
whose name and offset the sender chooses. Nor are interprocess events: their handles resolve only through a
/dev/shm both processes share, which no jailed child has. Two processes' streams order their work through
32-bit words in IPC device memory instead (`wait_word`, `write_word`), which the driver resolves by itself.
"""

from __future__ import annotations

import ctypes
import functools

import torch

_HANDLE_BYTES = 64
_LAZY_ENABLE_PEER_ACCESS = 1
_WAIT_EQ = 0x1  # CU_STREAM_WAIT_VALUE_EQ
WORD = 1 << 31  # a word holds a sequence number modulo this (an int32)


class IpcError(RuntimeError):
    """A handle that cannot be opened, or a region outside the allocation it names."""


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * _HANDLE_BYTES)]


@functools.cache
def _driver() -> ctypes.CDLL:
    lib = ctypes.CDLL("libcuda.so.1")
    for name in ("cuStreamWaitValue32_v2", "cuStreamWriteValue32_v2"):
        getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
    return lib


def _call(name: str, *args) -> None:
    rc = getattr(_driver(), name)(*args)
    if rc != 0:
        raise IpcError(f"{name} failed (CUDA driver error {rc})")


def allocation(ptr: int) -> tuple[int, int]:
    """(base, size) of the device allocation that contains `ptr`."""
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    _call("cuMemGetAddressRange_v2", ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr))
    return base.value, size.value


def export(ptr: int) -> dict:
    """Where the device bytes at `ptr` are, as another process on the same GPU can open them. The caller keeps
    them alive (and their writes finished) until the receiver is done."""
    base, _ = allocation(ptr)
    handle = _Handle()
    _call("cuIpcGetMemHandle", ctypes.byref(handle), ctypes.c_uint64(base))
    return {"handle": ctypes.string_at(ctypes.addressof(handle), _HANDLE_BYTES).hex(), "offset": ptr - base}  # NULs included


def wait_word(stream: int, ptr: int, seq: int) -> None:
    """Stream `stream` (a CUstream) runs nothing more until the word at device address `ptr` holds `seq`: its
    front end polls the word, taking no SM from anyone."""
    _call("cuStreamWaitValue32_v2", ctypes.c_void_p(stream), ctypes.c_uint64(ptr), ctypes.c_uint32(seq % WORD),
          ctypes.c_uint(_WAIT_EQ))


def host_word(ptr: int) -> int:
    """The device address of pinned host memory at `ptr`, which a stream can wait on (wait_word)."""
    device_ptr = ctypes.c_uint64()
    _call("cuMemHostGetDevicePointer_v2", ctypes.byref(device_ptr), ctypes.c_void_p(ptr), ctypes.c_uint(0))
    return device_ptr.value


def write_word(stream: int, ptr: int, seq: int) -> None:
    """Stream `stream` writes `seq` into the word at `ptr` once its earlier work ended, behind a memory fence:
    what that work wrote is visible to whoever sees the word."""
    _call("cuStreamWriteValue32_v2", ctypes.c_void_p(stream), ctypes.c_uint64(ptr), ctypes.c_uint32(seq % WORD),
          ctypes.c_uint(0))


class _Bytes:
    """A device byte range as __cuda_array_interface__, which torch.as_tensor wraps without a copy."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3}  # torch refuses read-only


class Opened:
    """The allocations of one handoff (or of a server's calls), each opened in this process once however many
    ranges are read through it (the driver maps a handle once per context); `close` unmaps them (after the device
    finished)."""

    def __init__(self):
        self._bases: dict[bytes, ctypes.c_uint64] = {}

    def count(self) -> int:
        return len(self._bases)

    def holds(self, where: dict) -> bool:
        return bytes.fromhex(str(where.get("handle", ""))) in self._bases

    def open(self, where: dict, nbytes: int, align: int) -> torch.Tensor:
        """`nbytes` bytes at where['offset'] into the allocation of where['handle'], as a uint8 CUDA tensor; the
        offset must keep elements of `align` bytes aligned (a misaligned read is a sticky CUDA error)."""
        raw = bytes.fromhex(str(where["handle"]))
        offset = int(where["offset"])
        if len(raw) != _HANDLE_BYTES or offset < 0 or offset % align:
            raise IpcError("a malformed IPC handle or a misaligned offset")
        base = self._bases.get(raw)
        if base is None:
            torch.cuda.init()
            handle, base = _Handle(), ctypes.c_uint64()
            ctypes.memmove(ctypes.addressof(handle), raw, _HANDLE_BYTES)
            _call("cuIpcOpenMemHandle_v2", ctypes.byref(base), handle, ctypes.c_uint(_LAZY_ENABLE_PEER_ACCESS))
            self._bases[raw] = base
        start, size = allocation(base.value)
        if base.value + offset + nbytes > start + size:
            raise IpcError(f"{nbytes:,} bytes at offset {offset:,} lie outside the {size:,}-byte allocation handed over")
        if nbytes == 0:
            return torch.empty(0, dtype=torch.uint8, device="cuda")
        return torch.as_tensor(_Bytes(base.value + offset, nbytes), device="cuda")

    def close(self) -> None:
        if self._bases:
            torch.cuda.synchronize()
        for base in self._bases.values():
            _driver().cuIpcCloseMemHandle(base)
        self._bases.clear()
