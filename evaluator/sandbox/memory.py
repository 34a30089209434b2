"""The parent's reads of a child's memory (process_vm_readv): a forward server's outputs and control page are read
where they lie, by kforge, at the moment kforge chooses, with nothing of the child's code on the way. A CPU output is never
copied by the child for kforge, so no copy sits inside the timed window. kforge reads as root (CAP_SYS_PTRACE) or
as the child's own uid; a child that makes itself unreadable (not dumpable) gets no verdict from its outputs."""

from __future__ import annotations

import ctypes
import os

_libc = ctypes.CDLL(None, use_errno=True)
_libc.process_vm_readv.restype = ctypes.c_ssize_t
_libc.process_vm_readv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                                   ctypes.c_ulong]
_MAX_IOV = 1024  # the kernel's IOV_MAX: one call reads at most this many pieces


class Unreadable(OSError):
    """The child's memory at the place it named cannot be read (a bad address, a process gone, no permission)."""


class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def server_pid(outer: int) -> int:
    """The host pid of a jailed child's process (the jail's outer process has one child: it), else `outer`."""
    try:
        children = open(f"/proc/{outer}/task/{outer}/children").read().split()
    except OSError:
        return outer
    return int(children[0]) if len(children) == 1 else outer


def read_pieces(pid: int, remote: ctypes.Array, count: int, into: int) -> int:
    """Read `count` (address, length) pieces of `pid`'s memory (an Iovec array) back to back into the bytes at
    address `into`; the bytes read."""
    done, size = 0, ctypes.sizeof(Iovec)
    for at in range(0, count, _MAX_IOV):
        n = min(_MAX_IOV, count - at)
        want = sum(remote[k].len for k in range(at, at + n))
        local = Iovec(into + done, want)
        got = _libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote, at * size), n, 0)
        if got < 0:
            err = ctypes.get_errno()
            raise Unreadable(err, f"reading the child's memory: {os.strerror(err)}")
        done += got
        if got < want:
            break
    return done


def read_range(pid: int, address: int, nbytes: int) -> bytearray:
    """`nbytes` of `pid`'s memory from `address`, whole or Unreadable (a short read is a range the child does not
    have)."""
    out = bytearray(nbytes)
    if not nbytes:
        return out
    remote = (Iovec * 1)(Iovec(address, nbytes))
    if read_pieces(pid, remote, 1, ctypes.addressof((ctypes.c_char * nbytes).from_buffer(out))) != nbytes:
        raise Unreadable(0, f"only part of {nbytes:,} bytes at {address:#x} could be read")
    return out



class Word:
    """One u64 of `pid`'s memory at `address`, read again on every `get`: the cheapest look a spin can take."""

    def __init__(self, pid: int, address: int):
        self.value = ctypes.c_uint64()
        self.local = Iovec(ctypes.addressof(self.value), 8)
        self.remote = Iovec(address, 8)
        self.pid = pid

    def get(self) -> int:
        if _libc.process_vm_readv(self.pid, ctypes.byref(self.local), 1, ctypes.byref(self.remote), 1, 0) != 8:
            err = ctypes.get_errno()
            raise Unreadable(err, f"reading the child's word at {self.remote.base or 0:#x}: {os.strerror(err)}")
        return self.value.value
