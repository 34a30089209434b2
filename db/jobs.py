"""Queued jobs of a shared judging service and the clients that asked for them: a job is kept from the moment it is
accepted until its one verdict is stored, so a server killed at any point resumes every accepted job. Plain values
in and rows out; what a job's fields mean to the judge is the caller's. A mixin of Database."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.orm import Session

from db.engine import guarded, retry_on_conflict
from db.models import Job, JobClient, utcnow
from db.rows import EvaluationRow, _Row, evaluation_row

_OPEN = ("queued", "running")
JOB_FIELDS = ("problem_name", "problem_path", "problem_sha256", "candidate_sha256", "source")


class JobRow(_Row):
    """One job as one client sees it: `cancelled` once that client withdrew its claim, whatever the job does for
    others; `position` counts the queued jobs of its board ahead of it, plus one (None unless queued)."""

    id: int
    board: str
    state: str
    problem_name: str
    problem_path: str
    problem_sha256: str
    candidate_sha256: str
    error: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    position: int | None = None
    evaluation: EvaluationRow | None = None
    source: str | None = None  # only where asked for


def _ahead(s: Session, job: Job) -> int:
    """Queued jobs of the job's board before it in the queue's order."""
    earlier = or_(Job.queued_at < job.queued_at, and_(Job.queued_at == job.queued_at, Job.id < job.id))
    return s.scalar(select(func.count()).where(Job.state == "queued", Job.board == job.board, earlier)) or 0


def _row(s: Session, job: Job, claim: JobClient | None = None, with_source: bool = False) -> JobRow:
    state = "cancelled" if claim is not None and claim.cancelled else job.state
    cols = {k: getattr(job, k) for k in ("id", "board", "problem_name", "problem_path", "problem_sha256",
                                         "candidate_sha256", "error", "created_at", "started_at", "finished_at")}
    return JobRow(state=state, position=_ahead(s, job) + 1 if state == "queued" else None,
                  evaluation=job.evaluation and evaluation_row(job.evaluation),
                  source=job.source if with_source else None, **cols)


class Jobs:
    """Accept, read, cancel, take and finish jobs."""

    @guarded
    @retry_on_conflict  # two clients sending the same job at once: the loser of the insert finds the winner's row
    def enqueue_job(self, client: str, key: str, board: str, **fields: Any) -> tuple[JobRow, bool]:
        """The job under `key`, made (True) or found (False), with the client's claim on it. A cancelled job asked
        for again is queued again, at the end of the queue; a finished one stays as it is."""
        if set(fields) != set(JOB_FIELDS):
            raise TypeError(f"enqueue_job() takes exactly {', '.join(JOB_FIELDS)}")
        with self.session(write=True) as s, s.begin():
            job = s.scalar(select(Job).where(Job.key == key))
            made = job is None
            if made:
                job = Job(key=key, board=board, **fields)
                s.add(job)
                s.flush()
            elif job.state == "cancelled":
                job.state, job.queued_at, job.finished_at = "queued", utcnow(), None
            claim = s.get(JobClient, (job.id, client)) or JobClient(job_id=job.id, client=client)
            claim.cancelled = False
            s.add(claim)
            s.flush()
            return _row(s, job, claim), made

    @guarded
    def client_job(self, job_id: int, client: str, with_source: bool = False) -> JobRow | None:
        """The job, if this client asked for it (None for anyone else's: it is not said to exist)."""
        with self.session() as s, s.begin():
            claim = s.get(JobClient, (job_id, client))
            return None if claim is None else _row(s, s.get(Job, job_id), claim, with_source)

    @guarded
    def client_jobs(self, client: str, open_only: bool = False) -> list[JobRow]:
        """The jobs this client asked for, oldest first; open_only: those queued or running for it."""
        stmt = select(Job, JobClient).join(JobClient, JobClient.job_id == Job.id).where(JobClient.client == client)
        if open_only:
            stmt = stmt.where(Job.state.in_(_OPEN), JobClient.cancelled.is_(False))
        with self.session() as s, s.begin():
            return [_row(s, job, claim) for job, claim in s.execute(stmt.order_by(Job.id))]

    @guarded
    def open_job_count(self, client: str, board: str) -> int:
        """How many of the board's jobs are queued or running for this client (its claim not withdrawn): what a
        limit on a client's open jobs counts, in one query where client_jobs builds every job's row."""
        stmt = (select(func.count()).select_from(Job).join(JobClient, JobClient.job_id == Job.id)
                .where(JobClient.client == client, JobClient.cancelled.is_(False), Job.board == board,
                       Job.state.in_(_OPEN)))
        with self.session() as s, s.begin():
            return s.scalar(stmt) or 0

    @guarded
    def job_state(self, key: str) -> str | None:
        """The state of the job under `key` (None: there is none), so a caller can tell before enqueue_job whether
        asking for it would put a job in the queue."""
        with self.session() as s, s.begin():
            return s.scalar(select(Job.state).where(Job.key == key))

    @guarded
    def queue_counts(self, board: str) -> dict[str, int]:
        """How many jobs of the board are queued and running."""
        stmt = select(Job.state, func.count()).where(Job.board == board, Job.state.in_(_OPEN)).group_by(Job.state)
        with self.session() as s, s.begin():
            return {state: 0 for state in _OPEN} | dict(s.execute(stmt).all())

    @guarded
    def cancel_job(self, job_id: int, client: str) -> JobRow | None:
        """Withdraws the client's claim on a queued job; the job is cancelled once no claim is left. A job already
        running or finished is returned as it is (None: not this client's job)."""
        with self.session(write=True) as s, s.begin():
            claim = s.get(JobClient, (job_id, client), with_for_update=True)
            if claim is None:
                return None
            job = s.get(Job, job_id, with_for_update=True)
            if job.state != "queued":
                return _row(s, job, claim)
            claim.cancelled = True
            s.flush()
            wanted = s.scalar(select(func.count()).where(JobClient.job_id == job_id, JobClient.cancelled.is_(False)))
            if not wanted:
                job.state, job.finished_at = "cancelled", utcnow()
            return _row(s, job, claim)

    @guarded
    def take_jobs(self, board: str, most: int) -> list[JobRow]:
        """The next batch of the board, marked running, with their code: the first queued job and up to most - 1
        other queued jobs of its problem file, in the queue's order."""
        order = (Job.queued_at, Job.id)
        queued = select(Job).where(Job.state == "queued", Job.board == board).order_by(*order)
        with self.session(write=True) as s, s.begin():
            head = s.scalar(queued.limit(1).with_for_update(skip_locked=True))
            if head is None:
                return []
            same = queued.where(Job.problem_sha256 == head.problem_sha256, Job.id != head.id).limit(most - 1)
            batch = [head, *s.scalars(same.with_for_update(skip_locked=True))]
            for job in batch:
                job.state, job.started_at = "running", utcnow()
            s.flush()
            return [_row(s, job, with_source=True) for job in batch]

    @guarded
    def finish_job(self, job_id: int, evaluation_id: int | None = None, error: str = "") -> bool:
        """A running job's one outcome: done with its stored verdict, or failed with why. False: the job was not
        running (finished already), and nothing changed."""
        state = "done" if evaluation_id is not None else "failed"
        stmt = (update(Job).where(Job.id == job_id, Job.state == "running")
                .values(state=state, evaluation_id=evaluation_id, error=error, finished_at=utcnow()))
        with self.session(write=True) as s, s.begin():
            return s.execute(stmt, execution_options={"synchronize_session": False}).rowcount == 1

    @guarded
    def requeue_running(self, board: str) -> int:
        """Jobs left running by a server that stopped (killed, or shut down mid-batch) go back to the queue, in
        their place; how many. Only one server may serve a database's board."""
        stmt = update(Job).where(Job.state == "running", Job.board == board).values(state="queued", started_at=None)
        with self.session(write=True) as s, s.begin():
            return s.execute(stmt, execution_options={"synchronize_session": False}).rowcount
