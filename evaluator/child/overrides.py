"""Kernels a candidate registers in PyTorch's dispatcher for operators that exist before it is imported.

The harness's own tensor work after the timer stops (output snapshots, input refills and checksums) runs ATen
operators. guard.trusted() switches off modes and subclass overrides, not kernels: a candidate that registers
a kernel for aten::clone (torch.library in Python, TORCH_LIBRARY_IMPL in its extension) can do its work there,
untimed, and return at once from forward(). So every operator's registrations are read before the candidate
is imported and compared later: a kernel added, replaced or removed at any dispatch key (Python kernels,
fallthroughs, fake and autograd registrations included), a backend fallback added or removed, and a dispatch
key switched on or off for this thread (the Python dispatcher, which runs kernels kept on the Python side, is
one). The candidate's own operators (its own namespace) are new ones, never compared.

Cost: reading every operator's registrations (~3600 _dispatch_dump calls, ~12 us each) is ~45 ms on a 2-core
CPU (60-85 ms on the H100 host), per snapshot and per check; comparing them is one list equality (~1 ms).
Nothing cheaper reads a kernel replaced at a key that already had one: the per-key registration lists do not
change then. So the fork server takes the snapshot once (`take_base`), before it forks any child, and each
child starts from that copy: one read per candidate instead of two.
"""

from __future__ import annotations

import torch

_C = torch._C
_dump = _C._dispatch_dump  # bound now: the candidate may rebind torch._C's attributes, not these
_names = _C._dispatch_get_all_op_names
_has_fallback = _C._dispatch_has_backend_fallback
_included, _excluded = _C._dispatch_tls_local_include_set, _C._dispatch_tls_local_exclude_set
_KEYS = tuple(sorted(set(_C.DispatchKey.__members__.values()), key=int))  # aliases (Dense = CPU) once

# torch registers kernels for these namespaces' operators from Python when torch.distributed's modules are
# first imported, which torch._dynamo does (so a custom op's first call, or torch.compile): not the
# candidate's doing, and the harness calls none of these operators.
_TORCH_LAZY = frozenset({"_c10d_functional", "_c10d_functional_autograd", "_dtensor", "symm_mem"})


def _settle() -> None:
    """torch's own registrations for ATen operators on the first vmap or grad (decompositions at the
    FuncTorchBatched key), made before the snapshot, so an honest torch.func user does not show them."""
    from torch._functorch.predispatch import lazy_load_decompositions

    lazy_load_decompositions()


def _watched() -> tuple[str, ...]:
    return tuple(n for n in _names() if n.partition("::")[0] not in _TORCH_LAZY)


def _fallbacks() -> frozenset[str]:
    return frozenset(k.name for k in _KEYS if _has_fallback(k))


def _thread_keys() -> str:
    return f"included {_included()}, excluded {_excluded()}"


def _kernels(dump: str) -> list[str]:
    """A dump's kernel lines, each cut to its key and where it was registered."""
    return [line.partition(" :: ")[0] for line in dump.splitlines()
            if ": registered at " in line and not line.startswith("debug: ")]


def _describe(name: str, before: str, after: str) -> str:
    old, new = _kernels(before), _kernels(after)
    added = [k for k in new if k not in old] or [f"removed {k}" for k in old if k not in new] or ["its schema"]
    return f"{name} kernels changed ({'; '.join(added[:2])}{' ...' if len(added) > 2 else ''})"


class Overrides:
    """Snapshot of the dispatcher now; `changed()` names what differs since."""

    def __init__(self):
        _settle()
        self._ops = _watched()
        self._dumps = self._read()
        self._fallbacks = _fallbacks()
        self._keys = _thread_keys()

    def _read(self) -> list[str]:
        return list(map(_dump, self._ops))  # an operator no longer there dumps as ""

    def _operators(self) -> list[str]:
        dumps = self._read()
        if dumps == self._dumps:
            return []
        return [_describe(n, old, new) for n, old, new in zip(self._ops, self._dumps, dumps) if old != new]

    def changed(self) -> list[str]:
        found = self._operators()
        fallbacks = _fallbacks()
        found += [f"backend fallback added at {k}" for k in sorted(fallbacks - self._fallbacks)]
        found += [f"backend fallback removed at {k}" for k in sorted(self._fallbacks - fallbacks)]
        keys = _thread_keys()
        if keys != self._keys:
            found.append(f"dispatch keys of the harness's thread changed from {self._keys} to {keys}")
        return found


_base: Overrides | None = None  # taken by the fork server before it forks: every child starts from a copy


def take_base() -> None:
    """In the fork server: the snapshot its children start from."""
    global _base
    _base = Overrides()


def before_candidate() -> Overrides:
    """The dispatcher as it was before any candidate code ran: the fork server's snapshot in a forked child
    (nothing but kforge and the trusted problem file ran since), else read now."""
    return _base or Overrides()
