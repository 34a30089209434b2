"""What a Triton candidate needs in a CPU child, where its kernels run under Triton's interpreter (there is no GPU
to compile for; evaluator.sandbox.spawn.TRITON_ON_CPU): a benchmarker for multi-config autotuning (held to its
budget by evaluator/child/triton_autotune.py), and a compile for a GPU target that proves each kernel is one.

Under the interpreter a kernel's body runs as Python, once per program, on numpy: a body that calls torch or any
Python function passes there, and a GPU compile rejects it. So each of the candidate's own kernels is compiled, as
specialised by its first launch (pointer dtypes, integers, constexprs: the source alone does not give them), to a
cubin for an sm_90 target: no GPU is needed (TTIR, PTX, ptxas; ~0.5 s a kernel), and the cubin is thrown away.
The compile runs in a process of its own (`python -m evaluator.child.triton_cpu`, in the child's jail) without the
interpreter: in this one Triton's library kernels (tl.max, tl.sum) are interpreted ones, which a compile rejects.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile as triton_compile, make_backend
from triton.runtime.jit import JITFunction, create_function_from_signature

TARGET = GPUTarget("cuda", 90, 32)
_LAUNCH_ONLY = ("grid", "warmup")  # arguments of a launch, not of the kernel
_COMPILE_S = 300  # the child's own run budget bounds it too


def bench(kernel_call, quantiles=None):
    """Autotuning's benchmarker on CPU (Triton asks the GPU driver for one, and there is none): one call. The
    interpreter compiles nothing and its time says little of a GPU's, so more calls would only cost more; it picks
    a config that runs, and never decides a verdict."""
    start = time.perf_counter()
    kernel_call()
    took = (time.perf_counter() - start) * 1e3
    return [took] * len(quantiles) if quantiles else took


def _specialised(fn, args: tuple, kwargs: dict) -> dict:
    """A launch as JITFunction.run specialises it (its binder, with the target fixed instead of the driver's),
    as JSON: signature, constexprs and attributes by argument path, and the options the launch gave."""
    kernel, backend = JITFunction(fn), make_backend(TARGET)
    kwargs = {k: v for k, v in kwargs.items() if k not in _LAUNCH_ONLY}
    bound, specialization, options = create_function_from_signature(kernel.signature, kernel.params, backend)(*args, **kwargs)
    _, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound, specialization, options)
    return {"name": fn.__qualname__, "signature": signature,
            "constexprs": [[list(path), value] for path, value in constexprs.items()],
            "attrs": [[list(path), value] for path, value in attrs.items()],
            "options": {k: v for k, v in kwargs.items() if k not in kernel.arg_names}}


def _first_error(exc: BaseException) -> str:
    """The compiler's error: its last line, with where in the kernel it was (`at LINE:COL`) when it says so."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()] or [""]
    where = f"{lines[0]} " if lines[0].startswith("at ") and len(lines) > 1 else ""
    return f"{type(exc).__name__}: {where}{lines[-1]}"[:500]


def not_compiled(candidate: Path, launched: dict) -> dict[str, str]:
    """Each launched kernel that does not compile for the GPU target -> the compiler's first error."""
    kernels, errors = [], {}
    for fn, args, kwargs in launched.values():
        try:
            kernels.append(_specialised(fn, args, kwargs))
        except Exception as exc:  # noqa: BLE001 - a launch Triton cannot specialise is the kernel's error
            errors[fn.__qualname__] = _first_error(exc)
    if not kernels:
        return errors
    with tempfile.TemporaryDirectory() as scratch:
        asked, answer = Path(scratch) / "kernels.json", Path(scratch) / "errors.json"
        asked.write_text(json.dumps({"candidate": str(candidate), "kernels": kernels}, default=str))
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        ran = subprocess.run([sys.executable, "-m", "evaluator.child.triton_cpu", str(asked), str(answer)], env=env,
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=_COMPILE_S)
        if not answer.is_file():
            raise RuntimeError(f"kforge: the GPU-target compile of the Triton kernels ended without an answer: "
                               f"{ran.stderr.strip()[-2000:]}")
        return errors | json.loads(answer.read_text())


def _compile(module, kernel: dict) -> None:
    fn = module
    for part in kernel["name"].split("."):
        fn = getattr(fn, part)
    while not isinstance(fn, JITFunction) and hasattr(fn, "fn"):  # under @triton.autotune or @triton.heuristics
        fn = fn.fn
    if not isinstance(fn, JITFunction):
        raise TypeError(f"{kernel['name']} is not a kernel at the candidate's module level")
    constexprs = {tuple(path): value for path, value in kernel["constexprs"]}
    attrs = {tuple(path): value for path, value in kernel["attrs"]}
    options = make_backend(TARGET).parse_options(kernel["options"])
    triton_compile(ASTSource(fn, kernel["signature"], constexprs, attrs), target=TARGET, options=options.__dict__)


def _main(asked: Path, answer: Path) -> None:
    """The compile's own process: the candidate imported without the interpreter, each kernel compiled."""
    from evaluator.child.loading import import_file

    request = json.loads(asked.read_text())
    module = import_file(Path(request["candidate"]), "kforge_candidate")
    errors = {}
    for kernel in request["kernels"]:
        try:
            _compile(module, kernel)
        except Exception as exc:  # noqa: BLE001 - whatever the compiler raises is the kernel's error
            errors[kernel["name"]] = _first_error(exc)
    answer.write_text(json.dumps(errors))


if __name__ == "__main__":
    _main(Path(sys.argv[1]), Path(sys.argv[2]))
