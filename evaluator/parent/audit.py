"""Problem audit: would an output that does no real work pass a problem's correctness check?

The problem's reference child runs as for a batch and, where the expected outputs live, judges every trivial
answer of evaluator.child.audit_rules against them on every seed the evaluator draws. Any that passes is a problem to
fix (tolerance or inputs).
"""

from __future__ import annotations

import shutil

from pydantic import BaseModel

from evaluator.contracts import EvalSettings
from evaluator.parent.references import ReferenceServer
from evaluator.parent.batch import Batch
from reference_problems import Problem

__all__ = ["AuditFinding", "audit_problem"]


class AuditFinding(BaseModel):
    """One trivial answer on one problem; `passes` means the correctness check accepts it (a finding)."""

    problem: str
    trivial: str  # zeros, constant, mean, echo, half
    passes: bool
    applicable: bool = True  # echo needs an input shaped like the output
    max_abs_err: float | None = None  # worst over all seeds and outputs
    bad_fraction: float | None = None  # fraction of elements out of tolerance, at its smallest


def audit_problem(problem: Problem, device: str = "cpu", size: str = "small") -> list[AuditFinding]:
    """Every trivial answer against the problem's check, on the evaluator's seeds (ReferenceFailed if the
    reference cannot run)."""
    batch = Batch(EvalSettings(device=device, size=size, trials=2, timing=False))
    server = ReferenceServer(batch, problem, audit=True)
    try:
        ref = server.ready(lambda want=None: batch.gpus[0])
    finally:
        server.close()
        shutil.rmtree(batch.root, ignore_errors=True)
    return [AuditFinding(problem=problem.name, **finding) for finding in ref.audit]
