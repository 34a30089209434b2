"""Frozen, session-free copies of database rows, and the functions that make them from ORM objects:
callers never hold live ORM objects."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from db.models import ArchiveCell, Evaluation, Generation, GenerationReuse, Problem, Solution

EVAL_FIELDS = frozenset(c.key for c in Evaluation.__table__.columns) - {"id", "solution_id"}
GEN_FIELDS = frozenset(c.key for c in Generation.__table__.columns) - {"id", "problem_id", "solution_id"}


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True)


class ProblemRow(_Row):
    """A registered problem as stored: where its file was when it was last registered."""

    id: int
    name: str
    level: int
    path: str
    sha256: str
    created_at: datetime


class SolutionRow(_Row):
    """A stored candidate; parent_sha256 links it to the solution it was repaired from."""

    id: int
    sha256: str
    problem: str
    path: str | None
    source: str
    origin: str
    model: str | None
    seed_id: str | None
    parent_sha256: str | None
    normalized_sha256: str | None = None
    created_at: datetime


class EvaluationRow(_Row):
    """One stored verdict, with the solution and problem it belongs to."""

    id: int
    solution_sha256: str
    solution_path: str | None
    problem: str
    model: str | None
    status: str
    cause: str
    evidence: dict[str, Any]
    device: str
    device_name: str
    size: str
    precision: str = "fp32"
    candidate_ms: float | None
    candidate_std_ms: float | None
    reference_ms: float | None
    compiled_reference_ms: float | None
    speedup: float | None
    speedup_vs_compile: float | None
    torch_version: str
    cuda_version: str | None
    timings: dict[str, Any]
    wall_s: float
    created_at: datetime


class LeaderRow(_Row):
    """Per-problem summary: the best correct speedup and how the evaluations went (every evaluation counted,
    reruns included)."""

    problem: str
    level: int
    n_solutions: int
    n_evaluations: int
    evaluations_by_status: dict[str, int] = Field(default_factory=dict)
    best_speedup: float | None = None
    best_sha256: str | None = None
    best_path: str | None = None
    best_model: str | None = None
    best_device_name: str | None = None
    best_size: str | None = None
    best_precision: str | None = None
    candidate_ms: float | None = None
    reference_ms: float | None = None
    speedup_vs_compile: float | None = None


class BoardRow(LeaderRow):
    """A problem on one board (device, size, precision): its best there, and its solutions counted once each by
    their latest verdict there (a rerun replaces a verdict, never adds one). A problem whose solutions have no
    verdict at the precision has one row with no device."""

    device_name: str | None
    size: str | None
    precision: str
    solutions_by_status: dict[str, int] = Field(default_factory=dict)


class Removed(_Row):
    """What deleting solutions removed, and what it kept but unlinked: the LLM calls that wrote them (their spend
    stays counted) and the solutions built on them (now without a parent)."""

    solutions: list[str]  # sha256 of each removed solution
    evaluations: int
    archive_cells: int
    calls_unlinked: int
    children_unlinked: int


class SolutionVerdicts(_Row):
    """A stored solution and how many of its stored verdicts have each status: what `prune --dry-run` lists."""

    sha256: str
    problem: str
    path: str | None
    evaluations_by_status: dict[str, int]


class GenerationRow(_Row):
    """One stored LLM call and the candidate extracted from it, if any."""

    id: int
    problem: str
    request_hash: str
    provider: str
    model: str
    prompt: list[dict[str, Any]]
    response: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    latency_s: float
    turn: int
    sample: int
    run_id: int | None
    island: int | None
    prompt_kind: str
    parent_generation_id: int | None
    parent_generation_ids: list[int]  # every call its prompt built on, the refined parent first
    solution_sha256: str | None
    extraction_status: str
    created_at: datetime


class ReuseRow(_Row):
    """A stored answer given again instead of a paid call: the call reused, the run that took it, and when."""

    id: int
    generation_id: int
    run_id: int | None
    created_at: datetime


class RunRow(_Row):
    """A generate run: its settings, status, and what it has spent (tokens and dollars summed over its calls)."""

    id: int
    settings: dict[str, Any]
    status: str
    stop_reason: str
    wall_s: float
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    created_at: datetime
    updated_at: datetime


class SpendRow(_Row):
    """LLM spend of one group (a run, a problem, a model, or their combination): calls, tokens, dollars.
    unpriced counts calls whose model had no price, so a total in dollars never hides them."""

    run_id: int | None = None
    problem: str | None = None
    model: str | None = None
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    unpriced: int


class ArchiveRow(_Row):
    """One elite of a problem's archive: island, MAP-Elites cell, its solution and speedup."""

    problem: str
    device_name: str
    size: str
    precision: str = "fp32"
    island: int
    cell: str
    solution_sha256: str
    speedup: float
    migrated_from: int | None
    updated_at: datetime


def problem_row(problem: Problem) -> ProblemRow:
    return ProblemRow.model_validate(problem, from_attributes=True)


def solution_row(sol: Solution) -> SolutionRow:
    parent = sol.parent.sha256 if sol.parent is not None else None
    cols = {k: getattr(sol, k) for k in ("id", "sha256", "path", "source", "origin", "model", "seed_id", "normalized_sha256",
                                         "created_at")}
    return SolutionRow(problem=sol.problem.name, parent_sha256=parent, **cols)


def evaluation_row(ev: Evaluation) -> EvaluationRow:
    sol = ev.solution
    cols = {k: getattr(ev, k) for k in EVAL_FIELDS}
    return EvaluationRow(
        id=ev.id, solution_sha256=sol.sha256, solution_path=sol.path, problem=sol.problem.name, model=sol.model, **cols
    )


def generation_row(gen: Generation) -> GenerationRow:
    cols = {k: getattr(gen, k) for k in GEN_FIELDS}
    sha = gen.solution.sha256 if gen.solution is not None else None
    return GenerationRow(id=gen.id, problem=gen.problem.name, solution_sha256=sha,
                         parent_generation_ids=[p.parent_generation_id for p in gen.parents], **cols)


def reuse_row(reuse: GenerationReuse) -> ReuseRow:
    return ReuseRow.model_validate(reuse, from_attributes=True)


def archive_row(cell: ArchiveCell) -> ArchiveRow:
    cols = {k: getattr(cell, k) for k in ("device_name", "size", "precision", "island", "cell", "speedup", "migrated_from", "updated_at")}
    return ArchiveRow(problem=cell.solution.problem.name, solution_sha256=cell.solution.sha256, **cols)


def board_row(row: LeaderRow, device_name: str | None, size: str | None, precision: str,
              solutions_by_status: dict[str, int]) -> BoardRow:
    return BoardRow(**row.model_dump(), device_name=device_name, size=size, precision=precision,
                    solutions_by_status=solutions_by_status)


def leader_row(problem: Problem, n_solutions: int, counts: dict[str, int], best: Evaluation | None) -> LeaderRow:
    row = LeaderRow(
        problem=problem.name,
        level=problem.level,
        n_solutions=n_solutions,
        n_evaluations=sum(counts.values()),
        evaluations_by_status=counts,
    )
    if best is None:
        return row
    sol = best.solution
    return row.model_copy(
        update=dict(
            best_speedup=best.speedup,
            best_sha256=sol.sha256,
            best_path=sol.path,
            best_model=sol.model,
            best_device_name=best.device_name,
            best_size=best.size,
            best_precision=best.precision,
            candidate_ms=best.candidate_ms,
            reference_ms=best.reference_ms,
            speedup_vs_compile=best.speedup_vs_compile,
        )
    )
