"""Attacks kforge itself: kills the problem's comparer through its own outputs file. The comparer maps the raw-bytes
file the harness wrote, and reading a page of it after the file shrank is a SIGBUS. From the harness's close of each
file (an inotify watch of the out dir) until the parent removes it, a thread shrinks it to nothing and regrows it,
over and over: the comparer's size check sees either size, and where it passed, a read may meet the file empty (in
about one call of four on the 2-core machine, where the thread and the comparer share a core). Without a replacement
the comparer stays dead, and its problem's later candidates are `reference_error`. Its kernel is honest."""
import ctypes
import os
import struct
import threading

import torch.nn as nn

from tests.adversarial.tiny_ext import ext

OUT = "out"  # the child's cwd is its workdir: the harness writes out/<call>.out
IN_CLOSE_WRITE = 0x08
_libc = ctypes.CDLL(None, use_errno=True)


def events(fd: int):
    """(mask, name) of each inotify event on the out dir."""
    while True:
        buf, at = os.read(fd, 65536), 0
        while at < len(buf):
            _, mask, _, size = struct.unpack_from("iIII", buf, at)
            yield mask, buf[at + 16:at + 16 + size].rstrip(b"\0").decode()
            at += 16 + size


def shrink(name: str) -> None:
    """Shrink the file to nothing and regrow it until the parent removes it (it has been judged)."""
    try:
        fd = os.open(os.path.join(OUT, name), os.O_RDWR)
    except OSError:  # removed already
        return
    size = os.fstat(fd).st_size
    while os.fstat(fd).st_nlink:
        os.ftruncate(fd, 0)
        os.ftruncate(fd, size)
    os.close(fd)


def watch() -> None:
    fd = _libc.inotify_init1(0)
    os.makedirs(OUT, exist_ok=True)
    _libc.inotify_add_watch(fd, OUT.encode(), IN_CLOSE_WRITE)
    for _, name in events(fd):  # the harness's close of a file it wrote (or this thread's own, of a file gone since)
        shrink(name)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        threading.Thread(target=watch, daemon=True).start()

    def forward(self, x):
        return ext.relu(x)
