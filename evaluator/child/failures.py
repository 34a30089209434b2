"""kforge's own steps in a child (copying, handing over and checksumming outputs) failing for want of memory or
disk: said as kforge's failure, in words, apart from anything the candidate's code raised."""

from __future__ import annotations

import contextlib
import resource

import torch

from evaluator.protocol import KforgeFailure

WRITE = "write of the outputs for the comparer"


def _out_of_memory(exc: BaseException) -> bool:
    """torch's CPU allocator raises RuntimeError ("can't allocate memory"), CUDA's OutOfMemoryError, Python MemoryError."""
    text = str(exc)
    return isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or "can't allocate memory" in text \
        or "out of memory" in text.lower()


def _short_of_memory(exc: BaseException) -> str:
    """In words: under the child's address-space limit (CPU), else as torch said it (CUDA names the device's)."""
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    if soft != resource.RLIM_INFINITY:
        return f"out of memory under the child's {soft / 2**20:,.0f} MB limit"
    said = str(exc).strip().splitlines()
    return f"out of memory: {said[0][:200]}" if said else "out of memory"


@contextlib.contextmanager
def own(what: str, size: int = 0):
    """One of kforge's own steps in the child: an out-of-memory (or, for the write, an OSError) comes back as
    KforgeFailure, saying which step, how many bytes it handled and the limit. Any other error passes as it is:
    on CUDA it may be the candidate's kernel faulting asynchronously, reported at kforge's next call."""
    try:
        yield
    except KforgeFailure:
        raise
    except Exception as exc:
        if isinstance(exc, OSError) and what == WRITE:
            why = exc.strerror or str(exc)
        elif _out_of_memory(exc):
            why = _short_of_memory(exc)
        else:
            raise
        raise KforgeFailure(f"kforge's own {what} ({size / 1e9:.3g} GB) failed: {why}") from exc

