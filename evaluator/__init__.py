"""Sandboxed evaluation of candidate kernels: returns verdicts with evidence; never writes the db."""

from evaluator.contracts import EvalSettings, Evidence, Limits, Mismatch, Status, TimingStats, Verdict
from evaluator.runner import CandidateJob, EvaluatorError, evaluate

__all__ = [
    "CandidateJob", "EvalSettings", "EvaluatorError", "Evidence", "Limits", "Mismatch", "Status", "TimingStats",
    "Verdict", "evaluate",
]
