"""Evaluate-and-record, written once for every caller (the CLI, the agent loop): a stored verdict for the same code on
the same device and size is reused unless asked to rerun (kforge's own failures never are); the rest is evaluated
and every new verdict stored. Stored rows come back as Verdicts, so callers handle one kind of result."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Callable, Iterator, NamedTuple

from evaluator.contracts import EvalSettings, Evidence, Status, TimingStats, Verdict
from evaluator.hardware import device_name
from judging.record import record_verdict

if TYPE_CHECKING:
    from db import Database, EvaluationRow
    from evaluator.contracts import CandidateJob

NOT_REUSED = (Status.REFERENCE_ERROR.value,)  # kforge's side failed: no verdict on the code to reuse
Backend = Callable[..., Iterator[Verdict]]


class Judged(NamedTuple):
    verdict: Verdict
    evaluation_id: int | None
    reused: bool


def verdict_from_row(row: EvaluationRow) -> Verdict:
    """A stored evaluation back as a Verdict."""
    stats = {k: TimingStats.model_validate(v) for k, v in row.timings.items()}
    return Verdict(status=Status(row.status), problem=row.problem, solution_sha256=row.solution_sha256,
                   solution_path=row.solution_path, device=row.device, device_name=row.device_name, size=row.size,
                   evidence=Evidence.model_validate(row.evidence), speedup=row.speedup,
                   speedup_vs_compile=row.speedup_vs_compile, torch_version=row.torch_version,
                   cuda_version=row.cuda_version, wall_s=row.wall_s, **stats)


def split_stored(database: Database, jobs: list[CandidateJob], settings: EvalSettings,
                 rerun: bool = False) -> tuple[list[tuple[CandidateJob, Judged]], list[CandidateJob]]:
    """(jobs whose code already has a verdict here, with it; jobs still to evaluate)."""
    where, reused, todo = device_name(settings.device), [], []
    for job in jobs:
        row = None if rerun else database.find_evaluation(job.sha256, where, settings.size)
        if row and row.status not in NOT_REUSED:
            reused.append((job, Judged(verdict_from_row(row), row.id, True)))
        else:
            todo.append(job)
    return reused, todo


def evaluate_and_record(database: Database, jobs: list[CandidateJob], settings: EvalSettings,
                        backend: Backend | None = None, on_stage: Callable | None = None) -> Iterator[Judged]:
    """Evaluate (the local evaluator unless a backend is given; on_stage hears the local one's progress) and store
    each verdict as it comes; however the caller stops, the evaluator's children are stopped."""
    if not jobs:
        return
    if backend is None:
        from evaluator.sandbox.spawn import start_children

        start_children()  # the children's fork server imports torch while this process does, on the next line
    from evaluator.parent.runner import evaluate  # torch loads here, not when the CLI starts

    backend = backend or evaluate
    hooks = {"on_stage": on_stage} if on_stage and backend is evaluate else {}
    with contextlib.closing(backend(jobs, settings, **hooks)) as verdicts:
        for verdict in verdicts:
            yield Judged(verdict, record_verdict(database, verdict), False)
