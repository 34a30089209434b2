"""Does forward() launch a CuTe DSL or TileLang kernel of its own? Like the Triton watch (evaluator/child/
triton_watch.py): each compiled program is tied, where it is made, to the Python function it was compiled from,
and each launch during a watched call counts for the candidate when that function is in the candidate's file.

CuTe DSL (nvidia-cutlass-dsl 4.x, its one "legacy" compiler backend): every compile passes
BaseDSL.compile_and_cache with the traced function (`funcBody`; the DSL recompiles its rewritten body under the
same file name); a launch passes JitExecutor.run_compiled_program (a `cute.compile` result called, or a
`@cute.jit` function called directly), or, compiled with TVM FFI, the compiled function's own __call__.

TileLang: a kernel made by `@tilelang.jit` passes JITImpl.compile, which knows the decorated function; one made
by `tilelang.compile(prim_func)` carries its function as the PrimFunc's `orig_func`. A launch passes
JITKernel.__call__.

Limits: a launch through the library's lower layers (a TileLang kernel's `torch_function` called directly, the TVM
FFI base's __call__ called by hand) is not seen, so the candidate is judged as launching none of its own, never
the reverse; a token kernel beside PyTorch work passes, as for Triton.
"""

from __future__ import annotations

from functools import wraps
from pathlib import Path

from evaluator.child.launch_watch import LaunchWatch


class _ProgramWatch(LaunchWatch):
    """Compiled programs -> (the object kept alive so its id stays its own, the function it came from, a name)."""

    def __init__(self, candidate_file: Path):
        super().__init__(candidate_file)
        self._sources: dict[int, tuple[object, object, str]] = {}

    def _tie(self, program, fn, name: str) -> None:
        self.made(fn)
        if program is not None:
            self._sources[id(program)] = (program, fn, name)

    def _count(self, program, fallback=None) -> None:
        """A launch of `program`: of the function it was tied to, else of `fallback` (reported as made here)."""
        _, fn, name = self._sources.get(id(program), (None, fallback, "a program compiled where kforge did not see it"))
        self.made(fn)
        self.launched(fn, name)


class CuteWatch(_ProgramWatch):
    def __init__(self, candidate_file: Path):
        super().__init__(candidate_file)
        from cutlass.base_dsl.dsl import BaseDSL
        from cutlass.base_dsl.jit_executor import JitExecutor

        self._made_in, self._executor = BaseDSL, JitExecutor
        try:  # compiled with TVM FFI: present where apache-tvm-ffi is installed
            from cutlass.cutlass_dsl.tvm_ffi_provider import (TVMFFIJitCompiledFunction,
                                                              TVMFFIJitCompiledFunctionWithKwargs)
            self._ffi = (TVMFFIJitCompiledFunction, TVMFFIJitCompiledFunctionWithKwargs)
        except ImportError:
            self._ffi = ()

    def install(self) -> None:
        self._made_in.compile_and_cache = self._recording(self._made_in.compile_and_cache)
        self._executor.run_compiled_program = self._counting(self._executor.run_compiled_program,
                                                             lambda executor: getattr(executor.jit_module, "capi_func", None))
        for cls in self._ffi:
            cls.__call__ = self._counting(cls.__call__, lambda fn: fn)

    def held(self) -> dict[type, tuple[str, ...]]:
        return {self._made_in: ("compile_and_cache",), self._executor: ("run_compiled_program",),
                **{cls: ("__call__",) for cls in self._ffi}}

    def _recording(self, compile_and_cache):
        @wraps(compile_and_cache)
        def made(dsl, module, module_hash, function_name, *args, **kwargs):
            program = compile_and_cache(dsl, module, module_hash, function_name, *args, **kwargs)
            body = kwargs.get("funcBody")
            self._tie(program, body, function_name)  # a TVM FFI program is launched as itself
            self._tie(getattr(program, "capi_func", None), body, function_name)  # an executor launches this
            return program
        return made

    def _counting(self, launch, program_of):
        @wraps(launch)
        def counted(obj, *args, **kwargs):
            if self._calls is not None:
                self._count(program_of(obj))
            return launch(obj, *args, **kwargs)
        return counted


class TileLangWatch(_ProgramWatch):
    def __init__(self, candidate_file: Path):
        super().__init__(candidate_file)
        from tilelang.jit import JITImpl
        from tilelang.jit.kernel import JITKernel

        self._impl, self._kernel = JITImpl, JITKernel

    def install(self) -> None:
        compile_, call = self._impl.compile, self._kernel.__call__

        @wraps(compile_)
        def compiled(impl, *args, **kwargs):
            kernel = compile_(impl, *args, **kwargs)
            fn = getattr(impl.func, "orig_func", impl.func)
            self._tie(kernel, fn, getattr(fn, "__qualname__", "jit_kernel"))
            return kernel

        @wraps(call)
        def launched(kernel, *args, **kwargs):
            if self._calls is not None:
                self._count(kernel, getattr(getattr(kernel, "prim_func", None), "orig_func", None))
            return call(kernel, *args, **kwargs)

        self._impl.compile, self._kernel.__call__ = compiled, launched

    def held(self) -> dict[type, tuple[str, ...]]:
        return {self._impl: ("compile",), self._kernel: ("__call__",)}
