"""What the kernel watches of the Python kernel languages (Triton, the CuTe DSL, TileLang) share: a kernel is the
candidate's own when the Python function it was made from was compiled from the candidate's file; every launch
during a watched call counts, for the candidate or, with its name, as foreign (a library's kernel does no work of
the candidate's). Each language's watch wraps the entry points where its kernels are made and launched."""

from __future__ import annotations

import os
from pathlib import Path
from types import CodeType

from evaluator.protocol import Calls, Kernels


class LaunchWatch:
    """Install once, before the candidate is imported; then `call(fn)` runs fn and counts, like KernelWatch."""

    def __init__(self, candidate_file: Path):
        self.report = Kernels()  # modules: the candidate's own kernels, by qualified name, in the order made
        self.foreign: list[str] = []  # kernels defined elsewhere that a watched call launched
        self._file = os.path.realpath(candidate_file)
        self._own: dict[CodeType, bool] = {}
        self._calls: Calls | None = None

    def is_own(self, code: CodeType) -> bool:
        if code not in self._own:
            self._own[code] = os.path.realpath(code.co_filename) == self._file
        return self._own[code]

    def made(self, fn) -> None:
        """A kernel was made from `fn`: the first of the candidate's own from it is reported."""
        code = getattr(fn, "__code__", None)
        if code is not None and code not in self._own and self.is_own(code):
            self.report.modules.append(fn.__qualname__)

    def launched(self, fn, name: str = "") -> bool:
        """One launch of a kernel made from `fn` (where `fn` is no Python function: a foreign kernel known as
        `name`), counted if a call is watched; whether it counted as the candidate's own."""
        calls = self._calls
        if calls is None:
            return False
        code = getattr(fn, "__code__", None)
        if code is not None and self.is_own(code):
            calls.kernel += 1
            return True
        calls.foreign += 1
        name = f"{fn.__module__}.{fn.__qualname__}" if code is not None else name
        if name not in self.foreign:
            self.foreign.append(name)
        return False

    def call(self, fn):
        """fn() with every launch counted; returns its result and the counts."""
        calls = self._calls = Calls()
        try:
            result = fn()
        finally:
            self._calls = None
        return result, calls
