"""Judge-tampering detection inside the candidate child.

Before the candidate is imported, the child records what its own harness relies on: the functions of torch,
time, builtins and the harness modules (and their code objects), every attribute of torch.Tensor, and the
global numeric flags (TF32, cuDNN, matmul precision, thread count). After import and after every stage it
checks that nothing was replaced. This catches the published monkeypatching hacks (a patched
time.perf_counter, torch.cuda.Event or torch.manual_seed, TF32 switched on at import); it cannot stop a
candidate that patches, uses and restores within one call, which the parent's wall-clock check is for.
"""

from __future__ import annotations

import builtins
import gc
import json
import sys
import time
import types

import torch

from evaluator.child import overrides


class Tampered(Exception):
    """The candidate changed something the judge depends on."""


def backend_flags() -> dict[str, object]:
    """Process-wide settings that change the numbers or the speed of torch ops."""
    matmul = torch.backends.cuda.matmul
    return {
        "torch.backends.cuda.matmul.allow_tf32": matmul.allow_tf32,
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction": matmul.allow_fp16_reduced_precision_reduction,
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction": matmul.allow_bf16_reduced_precision_reduction,
        "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "torch.backends.cudnn.benchmark": torch.backends.cudnn.benchmark,
        "torch.backends.cudnn.deterministic": torch.backends.cudnn.deterministic,
        "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision(),
        "torch.get_num_threads()": torch.get_num_threads(),
        "active TorchFunctionModes": torch._C._len_torch_function_stack(),
        "active TorchDispatchModes": torch._C._len_torch_dispatch_stack(),
    }


class trusted:
    """For the harness's own tensor work (inputs, checksums, saving, the reads inside the timed window): no
    __torch_function__ or dispatch mode the candidate installed, nor a tensor subclass's overrides, can intercept
    it. A plain class, not a generator: it is entered inside the timed window on both sides, where a generator's
    frame cost 2.1 us and this 1.3 us."""

    __slots__ = ("_off",)

    def __enter__(self) -> None:
        self._off = (torch._C.DisableTorchFunction(), torch._C._DisableTorchDispatch())
        for off in self._off:
            off.__enter__()

    def __exit__(self, *exc) -> None:
        for off in reversed(self._off):
            off.__exit__(*exc)


def _watched_namespaces(harness: list[types.ModuleType]) -> dict[str, object]:
    """Modules whose callables the harness uses, and classes whose every attribute matters (torch.Tensor,
    the harness's own classes)."""
    spaces: dict[str, object] = {m.__name__: m for m in (torch, torch.cuda, time, builtins, gc, json, *harness)}
    spaces["torch.Tensor"] = torch.Tensor
    spaces.update((f"{m.__name__}.{k}", v) for m in harness for k, v in vars(m).items()
                  if isinstance(v, type) and v.__module__ == m.__name__)
    return spaces


def _identity(value) -> tuple:
    """An object and, for Python functions, its code and defaults (which can be swapped in place)."""
    if isinstance(value, types.FunctionType):
        return value, value.__code__, value.__defaults__
    return value, None, None


def _snapshot(space) -> dict[str, tuple]:
    if isinstance(space, type):
        return {k: _identity(v) for k, v in vars(space).items()}
    return {k: _identity(v) for k, v in vars(space).items()
            if callable(v) or isinstance(v, (types.ModuleType, torch.dtype))}  # a dtype: the child's precision


# torch itself rewraps some functions when torch._dynamo is first imported (e.g. torch.manual_seed), and a
# candidate that uses torch.compile triggers that: such a wrapper, closing over the original, is no tampering.
_DYNAMO_REWRAP = torch._compile._disable_dynamo(lambda: None).__code__


def _rewrapped_by_torch(old, new) -> bool:
    return getattr(new, "__code__", None) is _DYNAMO_REWRAP and any(c.cell_contents is old for c in new.__closure__ or ())


def _changed(before: tuple, after: tuple) -> bool:
    if before[0] is not after[0]:
        return not _rewrapped_by_torch(before[0], after[0])
    return any(a is not b for a, b in zip(before[1:], after[1:]))


class Guard:
    """Snapshot now; `check(when)` raises Tampered naming everything replaced since."""

    def __init__(self, harness: list[types.ModuleType], held: dict[type, tuple[str, ...]] | None = None):
        """`held`: attributes of other classes to hold too, named one by one (the kernel watch's wrapped entry
        points: restoring one hides launches), where the rest of the class is the library's own to change."""
        self._spaces = _watched_namespaces([*harness, overrides])
        self._before = {name: _snapshot(space) for name, space in self._spaces.items()}
        self._held = {(cls, name): _identity(vars(cls).get(name)) for cls, names in (held or {}).items() for name in names}
        self._flags = backend_flags()
        self._dispatcher = overrides.before_candidate()  # kernels registered for existing operators

    def _replaced(self, name: str) -> list[str]:
        space, before = self._spaces[name], self._before[name]
        now = vars(space)
        found = [k for k, old in before.items() if k not in now or _changed(old, _identity(now[k]))]
        if isinstance(space, type):  # a new class attribute that shadows an inherited one (e.g. Tensor.detach)
            found += [k for k in now if k not in before and any(k in vars(base) for base in space.__mro__[1:])]
        return [f"{name}.{k}" for k in found]

    def violations(self, dispatcher: bool = True) -> list[str]:
        replaced = [item for name in self._spaces for item in self._replaced(name)]
        replaced += [f"{cls.__module__}.{cls.__qualname__}.{name}" for (cls, name), old in self._held.items()
                     if _changed(old, _identity(vars(cls).get(name)))]
        flags = backend_flags()
        changed = [f"{k} changed from {v!r} to {flags[k]!r}" for k, v in self._flags.items() if flags[k] != v]
        return replaced + changed + (self._dispatcher.changed() if dispatcher else [])

    def check(self, when: str, dispatcher: bool = True) -> None:
        """`dispatcher=False` leaves the dispatcher's registrations for a later check: reading them costs 50-85 ms
        (every operator's kernels; 4 reads were 0.3 s of a 2 s warm candidate on an H100), and a kernel registered
        now is still registered then. The child reads them once, at its last check, after the probe; a kernel
        registered and removed again before a read is not seen by any schedule of reads."""
        found = self.violations(dispatcher)
        if found:
            raise Tampered(f"{when}: " + "; ".join(found[:8]) + (f" (+{len(found) - 8} more)" if len(found) > 8 else ""))


def harness_modules(problem: types.ModuleType | None = None) -> list[types.ModuleType]:
    """Every module of the child side: each evaluator module loaded in this process (a forked child's entry point
    is the fork server's `__main__`, and a module the guard left out, such as the one that lists the checked
    outputs, was patched unseen), the entry point, and the problem file, whose input and init functions the
    harness calls between timed calls (a wrapped get_inputs moved the work into the untimed refill)."""
    own = [m for name, m in sorted(sys.modules.items())
           if (name == "evaluator" or name.startswith("evaluator.")) and isinstance(m, types.ModuleType)]
    return [*own, *(m for m in (sys.modules.get("__main__"), problem) if m is not None)]
