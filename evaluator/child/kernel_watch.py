"""Does forward() run a compiled kernel? Records the extensions the candidate builds and counts calls into them.

Before the candidate is imported, torch.utils.cpp_extension.load_inline and load are wrapped so that every
module they return is recorded with its functions (pybind11 builtins, kept by identity, so a reference the
candidate captured early still counts). A watched forward() runs under a profile hook that counts C calls
to those functions and Python calls into the reference problem's file (calling the reference Model).

Limits: a candidate that calls its extension for a trivial part of the work (or only when it sees the
profile hook) passes; calls made from threads started before the watched call are not seen; extensions
registered as torch ops (is_python_module=False) or exposing classes cannot be counted and are only noted.
"""

from __future__ import annotations

import sys
import threading
import types
from functools import wraps
from pathlib import Path

import torch.utils.cpp_extension as cpp_extension

from evaluator.protocol import Calls, Kernels


class KernelWatch:
    """Install once, before the candidate is imported; then `call(fn)` runs fn and counts."""

    def __init__(self, problem_file: Path):
        self.report = Kernels()  # sent to the parent as it is
        self._functions: dict[int, object] = {}  # id -> function (kept alive so ids stay unique)
        self._problem_file = str(problem_file)

    def install(self) -> None:
        for name in ("load_inline", "load"):
            setattr(cpp_extension, name, self._recording(getattr(cpp_extension, name)))

    def _recording(self, loader):
        @wraps(loader)
        def load(*args, **kwargs):
            result = loader(*args, **kwargs)
            self._record(result, kwargs.get("name", args[0] if args else "?"))
            return result
        return load

    def _record(self, result, name: str) -> None:
        self.report.modules.append(name)
        values = vars(result).values() if isinstance(result, types.ModuleType) else []
        functions = [v for v in values if isinstance(v, types.BuiltinFunctionType)]
        if not functions or any(isinstance(v, type) for v in values):
            self.report.unverifiable.append(name)
        self._functions.update((id(f), f) for f in functions)

    def _hook(self, calls: Calls):
        def hook(frame, event, arg):
            if event == "c_call" and id(arg) in self._functions:
                calls.kernel += 1
            elif event == "call" and frame.f_code.co_filename == self._problem_file:
                calls.reference += 1
        return hook

    def call(self, fn):
        """fn() under the profile hook (this thread and threads it starts); returns its result and the counts."""
        calls, previous = Calls(), threading.getprofile()
        hook = self._hook(calls)
        threading.setprofile(hook)
        sys.setprofile(hook)
        try:
            result = fn()
        finally:
            sys.setprofile(None)
            threading.setprofile(previous)
        return result, calls
