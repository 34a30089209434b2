"""The agent loop: sample N candidates, judge them, feed back what failed, refine the best, store everything."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from pydantic import BaseModel, Field

from db import Database
from evaluator import CandidateJob, EvalSettings, Evidence, Status, Verdict
from evaluator.hardware import device_name
from judging.record import record_solution, record_verdict, register_problem
from judging.reuse import evaluate_and_record, split_stored, verdict_from_row
from pipeline import cache
from pipeline.extract import VERDICT_STATUS, Extraction, extract
from pipeline.llm import LLMError, LLMRequest, Provider, Usage
from prompts import Turn, chat_messages
from reference_problems import Problem

DEFAULT_OUT = Path.home() / ".kforge" / "generations"
STATUS_RANK = {status: rank for rank, status in enumerate(Status)}  # Status is ordered by how far a candidate got


class RunConfig(BaseModel):
    samples: int = Field(1, ge=1)
    turns: int = Field(1, ge=1)  # rounds: the first sampling, then turns - 1 rounds of feedback
    concurrency: int = Field(4, ge=1)  # LLM calls in flight
    out_dir: Path = DEFAULT_OUT
    temperature: float | None = None
    max_tokens: int | None = None


class Parent(BaseModel):
    """A stored candidate to refine: its code, its latest verdict here, and the call that wrote it."""

    sha256: str
    source: str
    verdict: Verdict
    generation_id: int | None = None


class Candidate(BaseModel):
    problem: str
    turn: int
    sample: int
    generation_id: int
    cached: bool
    usage: Usage
    cost_usd: float | None = None
    extraction: Extraction
    path: Path | None = None
    verdict: Verdict | None = None  # None only when the answer had no code
    parent_sha256: str | None = None

    @property
    def status(self) -> str:
        return self.verdict.status.value if self.verdict else self.extraction.status.value

    def rank(self) -> tuple:
        """Higher is better: correct and fast first, then how far the candidate got."""
        if self.verdict is None:
            return (-1, 0.0, self.turn)
        return (STATUS_RANK[self.verdict.status], self.verdict.speedup or 0.0, self.turn)


class RunResult(BaseModel):
    problem: str
    candidates: list[Candidate] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)

    def best(self) -> Candidate | None:
        return max(self.candidates, key=Candidate.rank, default=None)


Events = Callable[[str, Candidate], None]  # ("answered" | "judged", candidate)


def write_candidate(out_dir: Path, problem: str, code: str) -> Path:
    """Content-addressed, so identical answers share one file and one evaluation."""
    raw = code.encode()
    path = out_dir / problem / f"{hashlib.sha256(raw).hexdigest()}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_bytes(raw)
    return path


def select_parent(database: Database, problem: Problem, settings: EvalSettings) -> Parent | None:
    """Refine the fastest correct candidate judged on this device and size; if none is correct, the latest failure."""
    rows = [r for r in database.evaluations(problem.name)
            if r.device == settings.device and r.size == settings.size and r.status != Status.SKIPPED.value]
    correct = [r for r in rows if r.status == Status.CORRECT.value]
    chosen = max(correct, key=lambda r: r.speedup or 0.0, default=None) or (rows[0] if rows else None)
    if chosen is None:
        return None
    solution = database.get_solution(chosen.solution_sha256)
    generation = next((g.id for g in database.generations(problem.name) if g.solution_sha256 == chosen.solution_sha256), None)
    return Parent(sha256=chosen.solution_sha256, source=solution.source, verdict=verdict_from_row(chosen),
                  generation_id=generation)


def static_verdict(extraction: Extraction, path: Path, problem: Problem, settings: EvalSettings) -> Verdict:
    """Cut-off or malformed answers get their verdict here: nothing is compiled for them."""
    return Verdict(status=VERDICT_STATUS[extraction.status], problem=problem.name,
                   solution_sha256=path.stem, solution_path=str(path), device=settings.device,
                   device_name=device_name(settings.device), size=settings.size,
                   evidence=Evidence(stage="parse", cause=extraction.cause), torch_version=torch.__version__)


class Loop:
    """One run against one problem: every call, candidate and verdict goes to the db as it happens."""

    def __init__(self, provider: Provider, database: Database, settings: EvalSettings, config: RunConfig,
                 events: Events | None = None) -> None:
        self.provider, self.database, self.settings, self.config = provider, database, settings, config
        self.events = events or (lambda kind, candidate: None)

    def run(self, problem: Problem) -> RunResult:
        register_problem(self.database, problem)
        result = RunResult(problem=problem.name)
        for turn in range(self.config.turns):
            parent = select_parent(self.database, problem, self.settings) if turn else None
            if turn and parent is None:
                result.errors.append(f"turn {turn}: no stored candidate of {problem.name} to refine")
                break
            drawn, errors = self._sample(problem, turn, parent)
            result.errors += errors
            result.candidates += self._judge(problem, drawn, parent)
            if not drawn:
                break
        return result

    def _sample(self, problem: Problem, turn: int, parent: Parent | None) -> tuple[list[Candidate], list[str]]:
        """N draws of one conversation, concurrently; a failed call costs that sample only."""
        history = [Turn(source=parent.source, verdict=parent.verdict)] if parent else []
        messages = chat_messages(problem, history, target=self.settings.device, size=self.settings.size)
        requests = [LLMRequest(problem=problem.name, messages=messages, sample=i, turn=turn,
                               temperature=self.config.temperature, max_tokens=self.config.max_tokens)
                    for i in range(self.config.samples)]
        drawn, errors = [], []
        with ThreadPoolExecutor(max_workers=min(self.config.concurrency, len(requests))) as pool:
            futures = [pool.submit(self._draw, problem, request, parent) for request in requests]
            for request, future in zip(requests, futures):
                try:
                    drawn.append(future.result())
                except LLMError as exc:
                    errors.append(f"turn {turn} sample {request.sample}: {exc}")
        return drawn, errors

    def _draw(self, problem: Problem, request: LLMRequest, parent: Parent | None) -> Candidate:
        key = cache.request_hash(self.provider.name, self.provider.model, request)
        hit = cache.lookup(self.database, key)
        response = hit[0] if hit else self.provider.complete(request)
        extraction = extract(response.text, response.finish_reason)
        parent_generation = parent.generation_id if parent else None
        generation_id = hit[1] if hit else cache.store(self.database, key, self.provider, request, response,
                                                        extraction.status.value, parent_generation)
        path = write_candidate(self.config.out_dir, problem.name, extraction.code) if extraction.code is not None else None
        candidate = Candidate(problem=problem.name, turn=request.turn, sample=request.sample, generation_id=generation_id,
                              cached=hit is not None, usage=response.usage, cost_usd=response.cost_usd,
                              extraction=extraction, path=path, parent_sha256=parent.sha256 if parent else None)
        self.events("answered", candidate)
        return candidate

    def _judge(self, problem: Problem, drawn: list[Candidate], parent: Parent | None) -> list[Candidate]:
        """Store each file; code already judged on this device keeps its verdict (a resumed run compiles nothing
        twice); the rest is judged, each distinct file once, and every new verdict stored."""
        files = [c for c in drawn if c.path is not None]
        jobs = [CandidateJob(path=c.path, problem=problem, source=c.extraction.code.encode()) for c in files]
        for job, c in zip(jobs, files):
            self._store(job, c, parent)
        reused, todo = split_stored(self.database, jobs, self.settings)
        verdicts = {job.path: judged.verdict for job, judged in reused}
        unreadable = {c.path: c.extraction for c in files if not c.extraction.ok}
        for job in todo:
            if job.path in unreadable:
                verdicts[job.path] = static_verdict(unreadable[job.path], job.path, problem, self.settings)
                record_verdict(self.database, verdicts[job.path])
        runnable = [job for job in todo if job.path not in unreadable]
        verdicts.update((Path(judged.verdict.solution_path), judged.verdict)
                        for judged in evaluate_and_record(self.database, runnable, self.settings))
        for c in drawn:
            c.verdict = verdicts.get(c.path)
            self.events("judged", c)
        return drawn

    def _store(self, job: CandidateJob, c: Candidate, parent: Parent | None) -> None:
        """The candidate's code as a solution; code already stored (the parent itself, an earlier answer) is no child
        of this parent, or lineage could loop."""
        parent_sha = parent.sha256 if parent and self.database.get_solution(job.sha256) is None else None
        record_solution(self.database, job, origin="repair" if c.turn else "generated", model=self.provider.model,
                        parent_sha256=parent_sha)
        self.database.set_generation_solution(c.generation_id, job.sha256)
