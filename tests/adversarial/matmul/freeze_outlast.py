"""The reference's own work (torch.matmul, so honestly 1.0x; the shared kernel runs on a token slice), plus a
thread that is inside one long uninterruptible kernel call whenever a round of timed calls ends, which is when
kforge stops the candidate's processes to time the reference beside them: mmap(MAP_POPULATE) of 768 MiB zeroes
every page in the kernel (~0.25 s of CPU here) and takes no SIGSTOP until it returns. A freeze that gave up
after its wait (0.2 s) timed the reference beside it on the same core, which flattered the candidate. The
mapping is dropped at the next round's last call, so the other calls run alone."""
import ctypes
import mmap
import sys
import threading

import torch
import torch.nn as nn

from tests.adversarial.tiny_ext import ext

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_POPULATE = 0x8000
_SIZE = 768 << 20
_round_ends = threading.Event()


def _populate() -> None:
    """At each round's last call: drop the last mapping, then fault in a new one, in the kernel (ctypes lets go
    of the GIL, and so does torch.matmul in the main thread)."""
    where = None
    while True:
        _round_ends.wait()
        _round_ends.clear()
        if where:
            _libc.munmap(where, _SIZE)
        where = _libc.mmap(None, _SIZE, mmap.PROT_READ | mmap.PROT_WRITE,
                           mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_POPULATE, -1, 0)
        where = None if where in (None, ctypes.c_void_p(-1).value) else where


threading.Thread(target=_populate, daemon=True).start()


def _last_of_round() -> bool:
    """Whether this call is the last timed call of its round (the timing loop's `k` and `n`)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_cpu_round" and "k" in frame.f_locals:
            return frame.f_locals["k"] == frame.f_locals["n"] - 1
        frame = frame.f_back
    return False


class ModelNew(nn.Module):
    def forward(self, A, B):
        if _last_of_round():
            _round_ends.set()
        ext.relu(A[:1, :1])
        return torch.matmul(A, B)
