"""What the service and its clients exchange: the request to judge a candidate, and the job and queue as a client
sees them. Pydantic models on both sides, so a body that does not fit is refused before anything is stored."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from evaluator.contracts import Verdict

NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,127}$"  # a registered problem's name, never a path on the server
FINISHED = ("done", "failed", "cancelled")
State = Literal["queued", "running", "done", "failed", "cancelled"]


class JobRequest(BaseModel):
    """One candidate and the problem it is judged against: a registered problem by name, or a KernelBench-format
    problem file's text (kept by the server under problem_name.py; a registered name with other content becomes
    NAME@SHA8, as `kforge submit --problem FILE` names it)."""

    model_config = ConfigDict(extra="forbid")

    # code that is no candidate (empty, no ModelNew) is no refusal: it is judged, as judging.api judges it
    candidate: str = Field(description="the candidate's Python source, defining ModelNew")
    problem: str | None = Field(None, pattern=NAME)
    problem_source: str | None = Field(None, min_length=1)
    problem_name: str = Field("problem", pattern=NAME)

    @model_validator(mode="after")
    def _one_problem(self) -> JobRequest:
        if (self.problem is None) == (self.problem_source is None):
            raise ValueError("give exactly one of problem (a registered name) and problem_source (a problem file's text)")
        if self.problem_name.endswith(".py"):
            raise ValueError("problem_name is a name, without .py")
        return self


class JobView(BaseModel):
    """A job as its client sees it. position: queued jobs ahead of it plus one (None unless queued); verdict: the
    stored verdict (Verdict, as `kforge submit` stores it) once done; reused: that verdict was stored before the
    worker took the job (taken back, not judged for it); error: why a failed job has none."""

    id: int
    state: State
    problem: str
    candidate_sha256: str
    position: int | None = None
    created: bool | None = None  # only in the answer to a submit: False when the same job was already there
    evaluation_id: int | None = None
    verdict: Verdict | None = None
    reused: bool = False
    error: str = ""
    submitted_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @property
    def finished(self) -> bool:
        return self.state in FINISHED


class QueueView(BaseModel):
    """The queue of the server's board (device/size/precision): how many jobs are queued and running, this
    client's own open jobs with their places, and the longest one batch of the worker may take (service.worker:
    batch_bound_s), from which a client bounds its wait."""

    board: str
    queued: int
    running: int
    batch_bound_s: float
    jobs: list[JobView]


class CodeView(BaseModel):
    """A job's candidate source, for the client that sent it."""

    id: int
    candidate_sha256: str
    candidate: str
