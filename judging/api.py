"""Judging from Python: (problem, code) pairs judged and stored as `kforge submit` judges and stores a file, one pair or
many in one batch, from a thread or from asyncio; every call answers in its pairs' order with the typed verdicts the
db holds. A Judge holds its backend: LocalBackend runs the evaluator on this machine's devices; any object with the
same `judge` method (a client of a judging service) can stand in for it without its callers changing. Like every
package, this one reads no environment: the db, the problems' folder and the settings are arguments."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Protocol

from pydantic import BaseModel

from evaluator.contracts import CandidateJob, EvalSettings, Verdict
from evaluator.hardware import auto_device
from judging.judge import Judged, Submission, judge_and_store
from judging.record import write_candidate
from reference_problems import Problem, resolve_problem

if TYPE_CHECKING:
    from db import Database

DEFAULT_OUT = Path.home() / ".kforge" / "candidates"


class Pair(BaseModel):
    """One thing to judge: a problem (a registered name, or the path of a KernelBench-format file) and a candidate's
    Python source."""

    problem: str
    code: str


class Judgment(BaseModel):
    """A pair's answer: its verdict as stored, the evaluation row that holds it, and whether that verdict was taken
    back from one stored before (the same code judged on this device and size, at this precision) instead of being
    evaluated now. A reused verdict is the same verdict: it counts the same."""

    verdict: Verdict
    evaluation_id: int | None
    reused: bool

    @classmethod
    def of(cls, judged: Judged) -> Judgment:
        return cls(verdict=judged.verdict, evaluation_id=judged.evaluation_id, reused=judged.reused)


class Backend(Protocol):
    """Where judging happens, as a Judge asks for it: every pair's judgment, in the pairs' order."""

    def judge(self, pairs: list[Pair]) -> list[Judgment]: ...


def default_settings() -> EvalSettings:
    """What `kforge submit` judges at by default: CUDA when torch sees a GPU here, else the CPU at the problems'
    small sizes."""
    device = auto_device()
    return EvalSettings(device=device, size="small" if device == "cpu" else "full")


def open_database(database: Database | str | None) -> Database:
    """A Database as given, one for a SQLAlchemy URL, or the user's ~/.kforge/kforge.db."""
    from db import Database

    if isinstance(database, Database):
        return database
    return Database(database) if database else Database.default()


class LocalBackend:
    """The evaluator on this machine's devices, every verdict stored in the db. One call's pairs are one evaluator
    batch (compiles in parallel, then each candidate alone on its device); identical pairs are judged once. Calls
    from several threads take turns, since a batch holds its devices for its whole run. A pair whose code is no
    candidate (no ModelNew, a syntax error) gets the evaluator's verdict on it, as a KernelBench sample would."""

    def __init__(self, db: Database | str | None = None, settings: EvalSettings | None = None, *,
                 problems_dir: Path | None = None, out_dir: Path = DEFAULT_OUT, rerun: bool = False):
        self.database = open_database(db)
        self.settings = settings or default_settings()
        self.problems_dir, self.out_dir, self.rerun = problems_dir, Path(out_dir), rerun
        self._turn = threading.Lock()

    def judge(self, pairs: list[Pair]) -> list[Judgment]:
        jobs = self._jobs(pairs)
        unique = {str(job.path): job for job in jobs}
        with self._turn:
            judged = judge_and_store(self.database, [Submission(job=job) for job in unique.values()], self.settings,
                                     rerun=self.rerun)
            by_path = {str(j.job.path): Judgment.of(j) for j in judged}
        return [by_path[str(job.path)] for job in jobs]

    def _jobs(self, pairs: list[Pair]) -> list[CandidateJob]:
        """Every pair's job, its code written where its children read it; a problem that is unknown, or has no
        small size when small is asked, raises ProblemError before anything is written, stored or run."""
        problems = {name: self._problem(name) for name in {pair.problem for pair in pairs}}
        return [CandidateJob(path=write_candidate(self.out_dir, problems[pair.problem].name, pair.code),
                             problem=problems[pair.problem], source=pair.code.encode()) for pair in pairs]

    def _problem(self, name: str) -> Problem:
        problem = resolve_problem(name, self.problems_dir)
        problem.overrides(self.settings.size)
        return problem


def as_pair(pair: Pair | tuple[str, str]) -> Pair:
    return pair if isinstance(pair, Pair) else Pair(problem=pair[0], code=pair[1])


class Judge:
    """Judges (problem, code) pairs: `judge` one, `judge_many` a list in one batch, and `ajudge` / `ajudge_many` the
    same from asyncio (in a worker thread, so the event loop goes on meanwhile). Without a backend it makes a
    LocalBackend of the keyword arguments (db, settings, problems_dir, out_dir, rerun)."""

    def __init__(self, backend: Backend | None = None, **local: Any):
        if backend is not None and local:
            raise TypeError("a Judge takes a backend or a local backend's arguments, not both")
        self.backend = backend or LocalBackend(**local)

    def judge(self, problem: str, code: str) -> Judgment:
        return self.judge_many([Pair(problem=problem, code=code)])[0]

    def judge_many(self, pairs: Iterable[Pair | tuple[str, str]]) -> list[Judgment]:
        return self.backend.judge([as_pair(pair) for pair in pairs])

    async def ajudge(self, problem: str, code: str) -> Judgment:
        return (await self.ajudge_many([Pair(problem=problem, code=code)]))[0]

    async def ajudge_many(self, pairs: Iterable[Pair | tuple[str, str]]) -> list[Judgment]:
        return await asyncio.to_thread(self.judge_many, list(pairs))
