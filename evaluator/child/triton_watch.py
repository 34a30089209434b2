"""Does forward() launch a Triton kernel of its own? Records the Triton kernels the candidate's file defines and
counts their launches apart from launches of Triton kernels defined anywhere else (a library's, torch inductor's),
which are no work of the candidate's.

Before the candidate is imported, Triton's kernel classes are wrapped where every kernel is made and where every
launch passes: InterpretedFunction.run under TRITON_INTERPRET=1 (CPU; Triton's launch hooks never fire there), and
CompiledKernel.launch_metadata when compiled (GPU; JITFunction.run, autotuned and heuristics kernels and a
CompiledKernel launched by hand all call it once per launch, with the kernel's source at hand). A kernel is the
candidate's own when its Python function was compiled from the candidate's file.

Limits: launches from any thread during a watched call count (a thread that keeps launching beside a forward()
doing PyTorch work passes, as a token kernel does); a kernel compiled from IR text has no Python source and counts
as foreign; a launcher that bypasses Triton's own (torch inductor's static CUDA launcher) is not seen at all.
"""

from __future__ import annotations

import os
from functools import wraps
from pathlib import Path
from types import CodeType

from triton.compiler.compiler import ASTSource, CompiledKernel
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

from evaluator.protocol import Calls, Kernels


def _interpreted_source(kernel: InterpretedFunction, kwargs: dict):
    """The Python function an interpreted launch runs; None for a warm-up, which runs nothing."""
    return None if kwargs.get("warmup") else kernel.fn


def _compiled_source(kernel: CompiledKernel, _kwargs: dict):
    """The Python function a compiled kernel was made from; the kernel itself where it was compiled from IR text."""
    return kernel.src.fn.fn if isinstance(kernel.src, ASTSource) else kernel


class TritonWatch:
    """Install once, before the candidate is imported; then `call(fn)` runs fn and counts, like KernelWatch."""

    def __init__(self, candidate_file: Path):
        self.report = Kernels()  # modules: the candidate's own kernels, by qualified name, in the order made
        self.foreign: list[str] = []  # kernels defined elsewhere that a watched call launched
        self._file = os.path.realpath(candidate_file)
        self._own: dict[CodeType, bool] = {}
        self._calls: Calls | None = None
        # the first interpreted launch of each own kernel: its function and arguments, for a compile that proves the
        # body is Triton (evaluator/child/triton_aot.py); held until taken
        self.launched: dict[CodeType, tuple] = {}

    def install(self) -> None:
        for cls in (JITFunction, InterpretedFunction):
            cls.__init__ = self._recording(cls.__init__)
        InterpretedFunction.run = self._counting(InterpretedFunction.run, _interpreted_source, keep=True)
        CompiledKernel.launch_metadata = self._counting(CompiledKernel.launch_metadata, _compiled_source)

    def held(self) -> dict[type, tuple[str, ...]]:
        """The entry points install() wrapped, for the guard to hold: restoring one hides launches."""
        return {JITFunction: ("__init__",), InterpretedFunction: ("__init__", "run"), CompiledKernel: ("launch_metadata",)}

    def _is_own(self, code: CodeType) -> bool:
        if code not in self._own:
            self._own[code] = os.path.realpath(code.co_filename) == self._file
        return self._own[code]

    def _recording(self, init):
        @wraps(init)
        def made(kernel, fn, *args, **kwargs):
            init(kernel, fn, *args, **kwargs)
            code = getattr(fn, "__code__", None)
            if code is not None and code not in self._own and self._is_own(code):  # made into a kernel the first time
                self.report.modules.append(fn.__qualname__)
        return made

    def _counting(self, launch, source_of, keep: bool = False):
        """launch wrapped: each launch during a watched call counts for the function source_of gives it (None: no
        launch); with `keep`, an own kernel's first launch is kept (self.launched)."""
        @wraps(launch)
        def counted(kernel, *args, **kwargs):
            calls, fn = self._calls, source_of(kernel, kwargs)
            if calls is not None and fn is not None:
                code = getattr(fn, "__code__", None)
                if code is not None and self._is_own(code):
                    calls.kernel += 1
                    if keep and code not in self.launched:
                        self.launched[code] = (fn, args, kwargs)
                else:
                    calls.foreign += 1
                    name = f"{fn.__module__}.{fn.__qualname__}" if code is not None else kernel.name
                    if name not in self.foreign:
                        self.foreign.append(name)
            return launch(kernel, *args, **kwargs)
        return counted

    def call(self, fn):
        """fn() with every Triton launch counted; returns its result and the counts."""
        calls = self._calls = Calls()
        try:
            result = fn()
        finally:
            self._calls = None
        return result, calls
