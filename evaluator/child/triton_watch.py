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

from functools import wraps
from pathlib import Path
from types import CodeType

from triton.compiler.compiler import ASTSource, CompiledKernel
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

from evaluator.child.launch_watch import LaunchWatch


def _interpreted_source(kernel: InterpretedFunction, kwargs: dict):
    """The Python function an interpreted launch runs; None for a warm-up, which runs nothing."""
    return None if kwargs.get("warmup") else kernel.fn


def _compiled_source(kernel: CompiledKernel, _kwargs: dict):
    """The Python function a compiled kernel was made from; the kernel itself where it was compiled from IR text."""
    return kernel.src.fn.fn if isinstance(kernel.src, ASTSource) else kernel


class TritonWatch(LaunchWatch):
    """Install once, before the candidate is imported; then `call(fn)` runs fn and counts, like KernelWatch."""

    def __init__(self, candidate_file: Path):
        super().__init__(candidate_file)
        # the first interpreted launch of each own kernel: its function and arguments, for a compile that proves the
        # body is Triton (evaluator/child/triton_aot.py); held until taken
        self.launched_first: dict[CodeType, tuple] = {}

    def install(self) -> None:
        for cls in (JITFunction, InterpretedFunction):
            cls.__init__ = self._recording(cls.__init__)
        InterpretedFunction.run = self._counting(InterpretedFunction.run, _interpreted_source, keep=True)
        CompiledKernel.launch_metadata = self._counting(CompiledKernel.launch_metadata, _compiled_source)

    def held(self) -> dict[type, tuple[str, ...]]:
        """The entry points install() wrapped, for the guard to hold: restoring one hides launches."""
        return {JITFunction: ("__init__",), InterpretedFunction: ("__init__", "run"), CompiledKernel: ("launch_metadata",)}

    def _recording(self, init):
        @wraps(init)
        def made(kernel, fn, *args, **kwargs):
            init(kernel, fn, *args, **kwargs)
            self.made(fn)
        return made

    def _counting(self, launch, source_of, keep: bool = False):
        """launch wrapped: each launch during a watched call counts for the function source_of gives it (None: no
        launch); with `keep`, an own kernel's first launch is kept (self.launched_first)."""
        @wraps(launch)
        def counted(kernel, *args, **kwargs):
            fn = source_of(kernel, kwargs)
            if fn is not None and self.launched(fn, getattr(kernel, "name", "")) and keep:
                self.launched_first.setdefault(fn.__code__, (fn, args, kwargs))
            return launch(kernel, *args, **kwargs)
        return counted
