"""Judge-and-store, written once for every caller (the CLI's submit and evaluate, the agent loop; judging.stream for
answers that arrive one by one): a candidate's code is stored with its lineage; what already stands for it is found
by `resolve` (a stored verdict, judging.reuse, or the one its caller reached, stored as it is); the rest is evaluated,
each normalized code once, and every new verdict stored as it comes."""

from __future__ import annotations

import contextlib
from collections import defaultdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, NamedTuple

from pydantic import BaseModel

from evaluator.contracts import CandidateJob, EvalSettings, Verdict
from judging.record import record_solution, record_verdict
from judging.reuse import stored_verdict, twin_verdict

if TYPE_CHECKING:  # annotations only: the CLI's start-up must not load SQLAlchemy
    from db import Database, EvaluationRow
    from evaluator.parent.stream import JobStream

Backend = Callable[..., Iterator[Verdict]]


class Submission(BaseModel):
    """One candidate for judge_and_store: its job, the lineage stored with its code (judging.record.record_solution),
    and what its caller already knows of it."""

    job: CandidateJob
    origin: str | None = None
    model: str | None = None
    parent_sha256: str | None = None
    seed_id: str | None = None
    normalized_sha256: str | None = None  # given: a stored verdict of the same normalized code stands for this one,
    # and of the batch's candidates with the same normalized code only the first is evaluated
    generation_id: int | None = None  # the LLM call whose answer this is, linked to the stored code
    verdict: Verdict | None = None  # reached without the evaluator (an answer cut off mid-file): stored as it is


class Reuse(NamedTuple):
    """Where a verdict taken back came from: the stored evaluation, when it was stored, and the code it judged (a
    twin's, of the same normalized code, where that is not the job's own)."""

    evaluation_id: int | None
    stored_at: datetime
    solution_sha256: str


class Judged(NamedTuple):
    verdict: Verdict
    evaluation_id: int | None
    reused_from: Reuse | None  # a verdict stored before, or the one of a twin in the same batch
    job: CandidateJob

    @property
    def reused(self) -> bool:
        return self.reused_from is not None


def judge_and_store(database: Database, submissions: list[Submission], settings: EvalSettings, *,
                    rerun: bool = False, backend: Backend | None = None,
                    on_evaluate: Callable[[int], None] | None = None,
                    on_stage: Callable | None = None) -> Iterator[Judged]:
    """One Judged per submission: first, in the submissions' order, each that a verdict already stands for
    (resolve), then the evaluated ones as they come, each followed by its twins of the batch. Every code is stored
    before any verdict is looked up. rerun: no stored verdict is reused. on_evaluate hears how many will be
    evaluated, before the first compile (only when some will); on_stage hears the local evaluator's progress."""
    for submission in submissions:
        store_submission(database, submission)
    first: dict[str, str] = {}
    runnable, twins = [], defaultdict(list)
    for submission in submissions:
        found = resolve(database, submission, settings, first, rerun)
        if isinstance(found, Judged):
            yield found
        elif found is not None:
            twins[found].append(submission.job)
        else:
            runnable.append(submission.job)
    if runnable and on_evaluate:
        on_evaluate(len(runnable))
    by_path = {str(job.path): job for job in runnable}
    for judged in evaluate_and_record(database, runnable, settings, by_path, backend, on_stage):
        yield judged
        yield from (twin_judged(judged, twin) for twin in twins[str(judged.job.path)])


def resolve(database: Database, submission: Submission, settings: EvalSettings, first: dict[str, str],
            rerun: bool = False) -> Judged | str | None:
    """What stands for one stored submission before any evaluation, in the order every caller keeps: a stored
    verdict of its own code; the verdict its caller reached (stored now); an earlier submission of the same
    normalized code, named by its path in `first` (its verdict will be this one's); a stored verdict of the same
    normalized code. None: it is evaluated, as the first of its normalized code (recorded in `first`)."""
    job, key = submission.job, submission.normalized_sha256
    if not rerun and (row := stored_verdict(database, job, settings)):
        return stored_judged(row, job)
    if submission.verdict is not None:
        return static_judged(database, submission)
    if key is not None and key in first:
        return first[key]
    if key is not None and not rerun and (row := twin_verdict(database, job, key, settings)):
        return stored_judged(row, job)
    if key is not None:
        first[key] = str(job.path)
    return None


def store_submission(database: Database, submission: Submission) -> None:
    """The code with its lineage. Code already stored (the parent itself, an earlier answer) is no child of the
    parent named now, or lineage could loop."""
    job, parent = submission.job, submission.parent_sha256
    if parent is not None and database.get_solution(job.sha256) is not None:
        parent = None
    record_solution(database, job, origin=submission.origin, model=submission.model, parent_sha256=parent,
                    seed_id=submission.seed_id, normalized_sha256=submission.normalized_sha256)
    if submission.generation_id is not None:
        database.set_generation_solution(submission.generation_id, job.sha256)


def stored_judged(row: EvaluationRow, job: CandidateJob) -> Judged:
    return Judged(Verdict.from_row(row), row.id, Reuse(row.id, row.created_at, row.solution_sha256), job)


def twin_judged(judged: Judged, job: CandidateJob) -> Judged:
    """The verdict just evaluated and stored for one code, taken for another submission of its normalized form."""
    return judged._replace(reused_from=Reuse(judged.evaluation_id, datetime.now(UTC), judged.job.sha256), job=job)


def static_judged(database: Database, submission: Submission) -> Judged:
    """A verdict reached without the evaluator, stored."""
    return Judged(submission.verdict, record_verdict(database, submission.verdict), None, submission.job)


def evaluate_and_record(database: Database, jobs: list[CandidateJob] | JobStream, settings: EvalSettings,
                        by_path: Mapping[str, CandidateJob], backend: Backend | None = None,
                        on_stage: Callable | None = None) -> Iterator[Judged]:
    """Evaluate (the local evaluator unless a backend is given; on_stage hears the local one's progress) and store
    each verdict as it comes, with the job `by_path` names for it (read as each verdict comes: a stream's jobs
    are added as they arrive); however the caller stops, the evaluator's children are stopped."""
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
            yield Judged(verdict, record_verdict(database, verdict), None, by_path[verdict.solution_path])
