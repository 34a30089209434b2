"""kforge's results database: problems, solutions, evaluations and LLM generations.

Stores plain values handed over by callers; knows nothing of the evaluator or the pipeline.
Names load on first use (PEP 562), so `db.metrics` is imported without SQLAlchemy (the CLI's start-up needs it).
"""

from __future__ import annotations

import importlib

_HOME = {
    "ORIGINS": "database", "Database": "database",
    "ConflictError": "engine", "DatabaseError": "engine", "NotFoundError": "engine", "default_url": "engine",
    "ArchiveRow": "rows", "BoardRow": "rows", "EvaluationRow": "rows", "GenerationRow": "rows", "LeaderRow": "rows",
    "ProblemRow": "rows", "Removed": "rows", "ReuseRow": "rows", "RunRow": "rows", "SolutionRow": "rows",
    "SolutionVerdicts": "rows", "SpendRow": "rows", "JobRow": "jobs",
}
__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module 'db' has no attribute {name!r}")
    return getattr(importlib.import_module(f"db.{_HOME[name]}"), name)
