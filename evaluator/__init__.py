"""Sandboxed evaluation of candidate kernels: returns verdicts with evidence; never writes the db.

Names load on first use (PEP 562), so `import evaluator.static` or a CLI's `--help` does not import torch."""

from __future__ import annotations

import importlib

_HOME = {
    "EvalSettings": "contracts", "Evidence": "contracts", "Limits": "contracts", "Mismatch": "contracts",
    "Status": "contracts", "TimingStats": "contracts", "Verdict": "contracts",
    "EvaluatorError": "contracts", "CandidateJob": "contracts", "evaluate": "runner", "compile_plan": "batch",
    "KernelProfile": "contracts", "Profile": "contracts", "profile": "profiling",
}
__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module 'evaluator' has no attribute {name!r}")
    return getattr(importlib.import_module(f"evaluator.{_HOME[name]}"), name)
