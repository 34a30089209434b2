"""Sandboxed evaluation of candidate kernels: returns verdicts with evidence; never writes the db.

The folders are the trust boundary and match the processes. `parent/` is the trusted scheduler (batches,
references, placement, the build cache); `verdict/` decides, from the typed messages a child sent, what a run
showed; both run in kforge's process and import nothing of `child/`, everything that runs beside candidate code
(trials, timing loops, guards, the kernel watch, the comparer). `build/` holds the build tools both processes run
(lean headers, the precompiled header, the nvcc driver); `sandbox/` starts and contains child processes (jail,
seccomp, cgroups, budgets, the fork server's client). Beside them, what they share: the contracts, the protocol,
the call labels, the timing method's figures, the statistics of samples, static checks, device facts and log
reading. An import goes only down: parent -> verdict -> child -> build -> sandbox -> shared, and never from parent
or verdict into child (tests/test_architecture.py).

Names load on first use (PEP 562), so `import evaluator.static` or a CLI's `--help` does not import torch."""

from __future__ import annotations

import importlib

_HOME = {
    "EvalSettings": "contracts", "Evidence": "contracts", "Limits": "contracts", "Mismatch": "contracts",
    "Status": "contracts", "TimingStats": "contracts", "Verdict": "contracts",
    "EvaluatorError": "contracts", "CandidateJob": "contracts", "evaluate": "parent.runner",
    "compile_plan": "parent.batch", "KernelProfile": "contracts", "Profile": "contracts", "profile": "parent.profiling",
}
__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module 'evaluator' has no attribute {name!r}")
    return getattr(importlib.import_module(f"evaluator.{_HOME[name]}"), name)
