"""Which stored verdict stands for a candidate, so that code judged on a device and size at a precision is not judged
there again (a verdict at another precision never stands for it):
the latest verdict of the same code, or of any code of the problem with the same normalized form, judged against
the same problem file at the same size; never one of
kforge's own failures, which said nothing about the code (Status.reusable), nor one judged as another language than
--backend asks for. A stored row comes back as a Verdict
(Verdict.from_row)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from evaluator.contracts import EvalSettings, Status
from evaluator.hardware import device_name

if TYPE_CHECKING:
    from db import Database, EvaluationRow
    from evaluator.contracts import CandidateJob


def _reusable(row: EvaluationRow | None, job: CandidateJob, settings: EvalSettings) -> EvaluationRow | None:
    """Not kforge's own failure, judged against this very problem (its file's content and the size that ran: a
    problem of the same name that computes something else is judged afresh) and as the language asked for
    (--backend), when one was."""
    if row is None or not Status(row.status).reusable:
        return None
    evidence = row.evidence
    if evidence.get("problem_sha256") != job.problem.sha256 or evidence.get("size") != job.problem.size_label(settings.size):
        return None
    asked = settings.language
    return row if asked is None or evidence.get("language") == asked.value else None


def stored_verdict(database: Database, job: CandidateJob, settings: EvalSettings) -> EvaluationRow | None:
    """The reusable verdict of the job's own code on this device and size, at this precision."""
    return _reusable(database.find_evaluation(job.sha256, device_name(settings.device), settings.size,
                                              precision=settings.precision), job, settings)


def twin_verdict(database: Database, job: CandidateJob, normalized_sha256: str,
                 settings: EvalSettings) -> EvaluationRow | None:
    """The reusable verdict, on this device and size at this precision, of the problem's code with the same
    normalized form."""
    row = database.find_twin_evaluation(job.problem.name, normalized_sha256, device_name(settings.device), settings.size,
                                        precision=settings.precision)
    return _reusable(row, job, settings)
