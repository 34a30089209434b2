"""ORM schema of the kforge results database (SQLAlchemy 2.0 typed declarative).

The tables store plain values handed over by callers; nothing here knows the evaluator or the pipeline.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime, ForeignKey, Index, MetaData, String, Text, TypeDecorator, UniqueConstraint
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class UTCDateTime(TypeDecorator[datetime]):
    """Stores UTC, returns aware datetimes: SQLite drops tzinfo, so normalise both ways."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


def utcnow() -> datetime:
    """Python-side default, so timestamps keep microseconds on every backend."""
    return datetime.now(UTC)


# Names for constraints and indexes, so a later Alembic migration can refer to them.
NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

JsonType = JSON().with_variant(JSONB(), "postgresql")


class Base(DeclarativeBase):
    """Declarative base with the project's type map and naming convention."""

    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {
        datetime: UTCDateTime(),
        str: String(),
        dict[str, Any]: JsonType,
        list[dict[str, Any]]: JsonType,
    }


class Problem(Base):
    """A reference problem, keyed by its unique name."""

    __tablename__ = "problems"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(unique=True)
    level: Mapped[int]
    path: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Solution(Base):
    """A candidate source, deduplicated by content hash; parent_id records repair lineage."""

    __tablename__ = "solutions"

    id: Mapped[int] = mapped_column(primary_key=True)
    sha256: Mapped[str] = mapped_column(unique=True)
    problem_id: Mapped[int] = mapped_column(ForeignKey("problems.id"), index=True)
    path: Mapped[str | None] = mapped_column(Text)
    source: Mapped[str] = mapped_column(Text)
    origin: Mapped[str] = mapped_column(default="submitted")  # seed|example|repair|generated|submitted
    model: Mapped[str | None]
    seed_id: Mapped[str | None]
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("solutions.id"))
    normalized_sha256: Mapped[str | None] = mapped_column(index=True)  # comments and whitespace dropped: twins
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    problem: Mapped[Problem] = relationship(lazy="joined")
    parent: Mapped[Solution | None] = relationship(remote_side=[id])


class Evaluation(Base):
    """One verdict of the evaluator for one solution on one device and size, at one precision."""

    __tablename__ = "evaluations"
    __table_args__ = (Index("ix_evaluations_lookup", "solution_id", "device_name", "size"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    solution_id: Mapped[int] = mapped_column(ForeignKey("solutions.id"))
    status: Mapped[str]
    cause: Mapped[str] = mapped_column(Text, default="")
    evidence: Mapped[dict[str, Any]] = mapped_column(default=dict)
    device: Mapped[str]  # "cpu" or "cuda"
    device_name: Mapped[str] = mapped_column(default="")
    size: Mapped[str] = mapped_column(default="full")  # "full" or "small"
    precision: Mapped[str] = mapped_column(default="fp32", server_default="fp32")  # "fp32", "fp16" or "bf16"
    candidate_ms: Mapped[float | None]
    candidate_std_ms: Mapped[float | None]
    reference_ms: Mapped[float | None]
    compiled_reference_ms: Mapped[float | None]
    speedup: Mapped[float | None]
    speedup_vs_compile: Mapped[float | None]
    torch_version: Mapped[str] = mapped_column(default="")
    cuda_version: Mapped[str | None]
    timings: Mapped[dict[str, Any]] = mapped_column(default=dict)
    wall_s: Mapped[float] = mapped_column(default=0.0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    solution: Mapped[Solution] = relationship(lazy="joined")


class EvaluationTally(Base):
    """How many evaluations one problem has per device, size, precision and status, and the best correct one among them.
    Database.add_evaluation keeps it in step in the same transaction, so the leaderboard, fast_p and geomean read a
    few rows per problem instead of aggregating every evaluation (1M rows took seconds)."""

    __tablename__ = "evaluation_tallies"

    problem_id: Mapped[int] = mapped_column(ForeignKey("problems.id"), primary_key=True)
    device_name: Mapped[str] = mapped_column(primary_key=True)
    size: Mapped[str] = mapped_column(primary_key=True)
    precision: Mapped[str] = mapped_column(primary_key=True, server_default="fp32")
    status: Mapped[str] = mapped_column(primary_key=True)
    n: Mapped[int]
    best_id: Mapped[int | None] = mapped_column(ForeignKey("evaluations.id"))  # see database._RANKED and _BEST


class Run(Base):
    """One `kforge generate` run: the settings it was started with (budgets included) and how far it got, so
    `--resume` continues it; its spend is the sum of its generations plus the wall seconds it has run."""

    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    settings: Mapped[dict[str, Any]]
    status: Mapped[str] = mapped_column(default="running")  # running|stopped|finished
    stop_reason: Mapped[str] = mapped_column(Text, default="")
    wall_s: Mapped[float] = mapped_column(default=0.0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class ArchiveCell(Base):
    """One cell of a problem's program archive: per island, the elite (fastest correct) solution of one MAP-Elites
    cell on one device and size, at one precision; migrated_from names the island it was copied from, if it came by migration."""

    __tablename__ = "archive_cells"

    problem_id: Mapped[int] = mapped_column(ForeignKey("problems.id"), primary_key=True)
    device_name: Mapped[str] = mapped_column(primary_key=True)
    size: Mapped[str] = mapped_column(primary_key=True)
    precision: Mapped[str] = mapped_column(primary_key=True, server_default="fp32")
    island: Mapped[int] = mapped_column(primary_key=True)
    cell: Mapped[str] = mapped_column(primary_key=True)
    solution_id: Mapped[int] = mapped_column(ForeignKey("solutions.id"))
    speedup: Mapped[float]
    migrated_from: Mapped[int | None]
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)

    solution: Mapped[Solution] = relationship()  # not joined by default: a cell is read FOR UPDATE alone


class Generation(Base):
    """One paid LLM call; request_hash lets the pipeline reuse a response instead of paying twice."""

    __tablename__ = "generations"

    id: Mapped[int] = mapped_column(primary_key=True)
    problem_id: Mapped[int] = mapped_column(ForeignKey("problems.id"), index=True)
    request_hash: Mapped[str] = mapped_column(index=True)
    provider: Mapped[str]
    model: Mapped[str]
    prompt: Mapped[list[dict[str, Any]]]  # chat messages
    response: Mapped[str] = mapped_column(Text)
    prompt_tokens: Mapped[int] = mapped_column(default=0)
    completion_tokens: Mapped[int] = mapped_column(default=0)
    cost_usd: Mapped[float | None]
    latency_s: Mapped[float] = mapped_column(default=0.0)
    turn: Mapped[int] = mapped_column(default=0)
    sample: Mapped[int] = mapped_column(default=0, server_default="0")
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id"), index=True)
    island: Mapped[int | None]
    prompt_kind: Mapped[str] = mapped_column(default="draft", server_default="draft")  # draft|refine
    parent_generation_id: Mapped[int | None] = mapped_column(ForeignKey("generations.id"))
    solution_id: Mapped[int | None] = mapped_column(ForeignKey("solutions.id"))
    extraction_status: Mapped[str] = mapped_column(default="ok")  # ok|truncated|no_code|no_model_new
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    problem: Mapped[Problem] = relationship(lazy="joined")
    solution: Mapped[Solution | None] = relationship(lazy="joined")
    parents: Mapped[list[GenerationParent]] = relationship(
        foreign_keys="GenerationParent.generation_id", order_by="GenerationParent.position", lazy="selectin")


class GenerationParent(Base):
    """Each call a prompt built on, in order: the parent it refines first, then any other it combines (a crossover's
    partner). parent_generation_id on the call itself is the first; a call with one parent has one row."""

    __tablename__ = "generation_parents"

    generation_id: Mapped[int] = mapped_column(ForeignKey("generations.id"), primary_key=True)
    position: Mapped[int] = mapped_column(primary_key=True)
    parent_generation_id: Mapped[int] = mapped_column(ForeignKey("generations.id"))


class GenerationReuse(Base):
    """A stored answer given again instead of a paid call, and the run that took it: the generations alone cannot
    say which answers a run got for nothing. One row per run and answer (a run resumed takes it again)."""

    __tablename__ = "generation_reuses"
    __table_args__ = (UniqueConstraint("generation_id", "run_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    generation_id: Mapped[int] = mapped_column(ForeignKey("generations.id"))
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Job(Base):
    """A candidate queued for judging by a shared service: the code and the problem file it is judged against, as
    sent, until its one verdict is stored. `key` hashes the problem's content, the code's and the board it is
    judged on (device, size, precision), so the same code sent for the same problem is one job, whoever sends it."""

    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_queue", "state", "board", "queued_at"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(unique=True)
    board: Mapped[str]  # "device/size/precision": a server judges only the jobs of its own board
    state: Mapped[str] = mapped_column(default="queued")  # queued|running|done|failed|cancelled
    problem_name: Mapped[str]
    problem_path: Mapped[str] = mapped_column(Text)  # the file the job is judged against (its content: problem_sha256)
    problem_sha256: Mapped[str]
    candidate_sha256: Mapped[str]
    source: Mapped[str] = mapped_column(Text)
    evaluation_id: Mapped[int | None] = mapped_column(ForeignKey("evaluations.id", ondelete="SET NULL"))
    error: Mapped[str] = mapped_column(Text, default="")  # why a failed job got no verdict
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    queued_at: Mapped[datetime] = mapped_column(default=utcnow)  # the queue's order: a cancelled job asked again joins its end
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]

    evaluation: Mapped[Evaluation | None] = relationship()


class JobClient(Base):
    """A client that asked for a job: it may read the job's code and verdict. Cancelling withdraws its claim; the
    job is cancelled once every claim on it is withdrawn, and asking for it again renews the claim."""

    __tablename__ = "job_clients"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), primary_key=True)
    client: Mapped[str] = mapped_column(primary_key=True, index=True)
    cancelled: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
