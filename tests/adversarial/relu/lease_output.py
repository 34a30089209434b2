"""Attacks kforge itself: takes a write lease on each raw-bytes file the harness wrote (it owns the file). Another
process's blocking open() of a leased file waits until the holder lets go, or for the kernel's lease-break-time
(45 s) where it never does (SIGIO ignored): the comparer would sit out its candidate's budget on every call. An
inotify watch of the out dir tells the thread when the harness closed a file. Its kernel is honest."""
import ctypes
import fcntl
import os
import signal
import struct
import threading

import torch.nn as nn

from tests.adversarial.tiny_ext import ext

OUT = "out"  # the child's cwd is its workdir: the harness writes out/<call>.out
IN_CLOSE_WRITE = 0x08
_libc = ctypes.CDLL(None, use_errno=True)
held = []  # the leased files' descriptors, kept open: closing one lets its lease go


def watch() -> None:
    fd = _libc.inotify_init1(0)
    os.makedirs(OUT, exist_ok=True)
    _libc.inotify_add_watch(fd, OUT.encode(), IN_CLOSE_WRITE)
    while True:
        buf, at = os.read(fd, 65536), 0
        while at < len(buf):
            size = struct.unpack_from("iIII", buf, at)[3]
            name = buf[at + 16:at + 16 + size].rstrip(b"\0").decode()
            at += 16 + size
            try:
                held.append(os.open(os.path.join(OUT, name), os.O_RDONLY))
                fcntl.fcntl(held[-1], fcntl.F_SETLEASE, fcntl.F_WRLCK)
            except OSError:  # removed already
                pass


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        signal.signal(signal.SIGIO, signal.SIG_IGN)  # a lease break's SIGIO would end this process
        threading.Thread(target=watch, daemon=True).start()

    def forward(self, x):
        return ext.relu(x)
