"""Who a sample refines and what its prompt shows beside it: the problem's best (or latest failure), or the
archive's pick with its partner, inspirations and contrastive pair; a first sample's kernels of similar problems."""

from __future__ import annotations

from pydantic import BaseModel, Field

from db import Database, EvaluationRow
from evaluator import EvalSettings, Status, Verdict
from pipeline.features import technique
from prompts import Example, Program
from reference_problems import Problem


class Parent(BaseModel):
    """A stored candidate to refine: its code, its latest verdict here, and the call that wrote it."""

    sha256: str
    source: str
    verdict: Verdict
    generation_id: int | None = None


class Slot(BaseModel):
    """One sample of a turn: the island it works on (with an archive), the parent it refines, and with an archive
    the partner to combine it with (a crossover) or the other kernels shown beside it."""

    sample: int
    island: int | None = None
    arm: int = 0  # the bandit's arm that answers it
    parent: Parent | None = None
    mode: str | None = None  # how the archive picked the parent: exploit, explore or history
    partner: Parent | None = None
    inspirations: list[Program] = Field(default_factory=list)
    contrast: list[Program] = Field(default_factory=list)  # (slower, faster) elites, shown side by side
    related: list[Example] = Field(default_factory=list)  # a draft's kernels of similar problems

    @property
    def parent_generation_ids(self) -> list[int]:
        """The calls that wrote the programs this slot's answer builds on: its parent, then a crossover's partner."""
        return [p.generation_id for p in (self.parent, self.partner) if p is not None and p.generation_id is not None]

    @property
    def kind(self) -> str:
        """The prompt this slot asks with, as stored on its generation."""
        if self.partner:
            return "crossover"
        return ("contrast" if self.contrast else "refine") if self.parent else ("related" if self.related else "draft")


def select_parent(database: Database, problem: Problem, settings: EvalSettings) -> Parent | None:
    """Refine the fastest correct candidate judged on this device and size at this precision; if none is correct,
    the latest failure."""
    here = (settings.device, settings.size, settings.precision)
    rows = [r for r in database.evaluations(problem.name)
            if (r.device, r.size, r.precision) == here and r.status != Status.SKIPPED.value]
    correct = [r for r in rows if r.status == Status.CORRECT.value]
    chosen = max(correct, key=lambda r: r.speedup or 0.0, default=None) or (rows[0] if rows else None)
    return None if chosen is None else parent_of(database, problem, chosen)


def parent_of(database: Database, problem: Problem, row: EvaluationRow) -> Parent:
    """A stored evaluation as a parent: its code, its verdict, and the call that wrote it (if one did)."""
    solution = database.get_solution(row.solution_sha256)
    generation = next((g.id for g in database.generations(problem.name) if g.solution_sha256 == row.solution_sha256), None)
    return Parent(sha256=row.solution_sha256, source=solution.source, verdict=Verdict.from_row(row),
                  generation_id=generation)


def program_of(parent: Parent) -> Program:
    """A correct stored kernel as the prompts show it: code, speedup, median time, technique."""
    v = parent.verdict
    return Program(source=parent.source, speedup=v.speedup or 0.0, median_ms=v.candidate.median_ms if v.candidate else None,
                   technique=technique(parent.source))
