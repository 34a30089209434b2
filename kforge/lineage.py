"""The lineage of each problem's LLM calls, for the report's lineage pages: the tree of calls (a refine call works on
its parent call's answer) and what became of every answer on each board (device, size), so speedups measured on
different hardware or sizes never mix. Data only: report.py draws it."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from db import EvaluationRow, GenerationRow, SolutionRow
from evaluator.contracts import Status

SPREAD = 0.7  # the calls of one turn share this much of the x axis around the turn

DeviceSize = tuple[str, str]  # (device_name, size): one board of the report


def call_page(generation_id: int) -> str:
    """A call's page, relative to the report root: its prompt, its reply and what became of its answer."""
    return f"calls/{generation_id}.html"


@dataclass(frozen=True)
class Call:
    """One LLM call and the verdicts of its answer, per board: its own, or those of the evaluated twin whose
    normalized code it repeats (the loop does not judge a near-duplicate again)."""

    gen: GenerationRow
    depth: int  # calls above it in the tree
    x: float  # its turn, moved within the turn by its place among the turn's calls
    judged_as: str | None
    verdicts: dict[DeviceSize, EvaluationRow]

    @property
    def correct(self) -> bool:
        return any(ev.status == Status.CORRECT for ev in self.verdicts.values())

    def speedup(self, board: DeviceSize) -> float | None:
        """The speedup on a board, only where the answer is correct and timed."""
        ev = self.verdicts.get(board)
        return ev.speedup if ev and ev.status == Status.CORRECT and ev.speedup else None


@dataclass(frozen=True)
class Lineage:
    problem: str
    calls: list[Call]  # depth first: each call right after its parent, siblings by id
    boards: list[DeviceSize]  # the boards any answer was judged on, full size first

    @property
    def page(self) -> str:
        """Relative to the report root; the name keeps only characters safe in a file name and a URL."""
        return f"lineage/{re.sub(r'[^A-Za-z0-9_.-]', '_', self.problem)}.html"

    @property
    def turns(self) -> tuple[int, int]:
        return min(c.gen.turn for c in self.calls), max(c.gen.turn for c in self.calls)

    @property
    def runs(self) -> int:
        """How many `kforge generate` runs made these calls (calls stored outside a run count in none)."""
        return len({c.gen.run_id for c in self.calls} - {None})

    def judged(self, board: DeviceSize) -> list[Call]:
        """The calls whose answer has a verdict on this board, left to right."""
        return sorted((c for c in self.calls if board in c.verdicts), key=lambda c: c.x)

    def best_so_far(self, board: DeviceSize) -> list[tuple[float, float]]:
        """(x, speedup) of each call that beat every correct speedup to its left on this board."""
        steps: list[tuple[float, float]] = []
        for c in self.judged(board):
            s = c.speedup(board)
            if s is not None and (not steps or s > steps[-1][1]):
                steps.append((c.x, s))
        return steps


def _tree(gens: list[GenerationRow]) -> list[tuple[GenerationRow, int]]:
    """(call, depth), depth first from the roots: calls whose parent is not among these."""
    ids = {g.id for g in gens}
    children: dict[int | None, list[GenerationRow]] = defaultdict(list)
    for g in sorted(gens, key=lambda g: g.id):
        children[g.parent_generation_id if g.parent_generation_id in ids else None].append(g)
    order, stack = [], [(g, 0) for g in reversed(children[None])]
    while stack:
        g, depth = stack.pop()
        order.append((g, depth))
        stack.extend((k, depth + 1) for k in reversed(children[g.id]))
    return order


def _positions(gens: list[GenerationRow]) -> dict[int, float]:
    """Per call id, its x: the calls of a turn spread evenly over SPREAD around it, by sample, then id."""
    by_turn: dict[int, list[int]] = defaultdict(list)
    for g in sorted(gens, key=lambda g: (g.sample, g.id)):
        by_turn[g.turn].append(g.id)
    return {gid: turn + SPREAD * ((k + 0.5) / len(ids) - 0.5) for turn, ids in by_turn.items()
            for k, gid in enumerate(ids)}  # fmt: skip


def _verdicts(evaluations: list[EvaluationRow]) -> dict[str, dict[DeviceSize, EvaluationRow]]:
    """Per solution, its newest evaluation on each board (the list is newest first)."""
    found: dict[str, dict[DeviceSize, EvaluationRow]] = defaultdict(dict)
    for ev in evaluations:
        found[ev.solution_sha256].setdefault((ev.device_name, ev.size), ev)
    return dict(found)


def judged_as(solutions: list[SolutionRow], judged: dict) -> dict[str, str | None]:
    """Per solution, itself if it was evaluated, else the first evaluated one with its normalized code (the loop does
    not judge a near-duplicate again): the page and `kforge export --trace` both read verdicts through it."""
    twins: dict[tuple[str, str | None], str] = {}
    for s in solutions:
        if s.normalized_sha256 and s.sha256 in judged:
            twins.setdefault((s.problem, s.normalized_sha256), s.sha256)
    return {s.sha256: s.sha256 if s.sha256 in judged else twins.get((s.problem, s.normalized_sha256))
            for s in solutions}  # fmt: skip


def _lineage(problem: str, gens: list[GenerationRow], twins: dict, verdicts: dict) -> Lineage:
    x = _positions(gens)
    calls = []
    for g, depth in _tree(gens):
        twin = twins.get(g.solution_sha256)
        calls.append(Call(g, depth, x[g.id], twin, verdicts.get(twin, {})))
    boards = sorted({b for c in calls for b in c.verdicts}, key=lambda b: (b[1] != "full", b))
    return Lineage(problem, calls, boards)


def lineages(generations: list[GenerationRow], solutions: list[SolutionRow],
             evaluations: list[EvaluationRow]) -> list[Lineage]:
    """One lineage per problem with stored LLM calls, by problem name."""
    verdicts = _verdicts(evaluations)
    twins = judged_as(solutions, verdicts)
    by_problem: dict[str, list[GenerationRow]] = defaultdict(list)
    for g in generations:
        by_problem[g.problem].append(g)
    return [_lineage(p, by_problem[p], twins, verdicts) for p in sorted(by_problem)]
