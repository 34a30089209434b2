"""Removing stored solutions, and what must stay consistent when one goes: its evaluations go, and with them their
counts in the tallies (a tally's best is chosen again among what remains); archive cells it holds go (the cell is
empty until a later run fills it); the LLM calls that wrote it stay, with their spend, no longer linked to it; the
solutions built on it stay, without a parent. A mixin of Database: it needs only `session()` and `url`."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Any

from sqlalchemy import delete, exists, func, select, update
from sqlalchemy.orm import Session

from db.engine import guarded
from db.models import ArchiveCell, Evaluation, EvaluationTally, Generation, Solution
from db.rows import Removed, SolutionRow, SolutionVerdicts, solution_row
from db.standings import problem_id_of, rebest

_CHUNK = 500  # solution ids per statement: SQLite caps the parameters of one statement
_QUIET = {"synchronize_session": False}  # bulk statements: the session holds none of the rows they change


def _doomed(statuses: Collection[str], problem: str | None, unevaluated: bool) -> Any:
    """The solutions whose every stored verdict has one of `statuses`: those with none at all only if
    `unevaluated`."""
    other = exists().where(Evaluation.solution_id == Solution.id, Evaluation.status.not_in(list(statuses)))
    stmt = select(Solution.id).where(~other).order_by(Solution.id)
    if not unevaluated:
        stmt = stmt.where(exists().where(Evaluation.solution_id == Solution.id))
    if problem is not None:
        stmt = stmt.where(Solution.problem_id == problem_id_of(problem))
    return stmt


def _untally(s: Session, ids: list[int]) -> list[EvaluationTally]:
    """Takes the evaluations of these solutions out of their tallies; returns the remaining tallies whose best was
    one of them, their best cleared (chosen again once those evaluations are gone)."""
    stmt = (select(Solution.problem_id, Evaluation.device_name, Evaluation.size, Evaluation.precision,
                   Evaluation.status, func.count())
            .join(Solution, Solution.id == Evaluation.solution_id).where(Evaluation.solution_id.in_(ids))
            .group_by(Solution.problem_id, Evaluation.device_name, Evaluation.size, Evaluation.precision,
                      Evaluation.status))
    for pid, device_name, size, precision, status, n in s.execute(stmt).all():
        key = dict(problem_id=pid, device_name=device_name, size=size, precision=precision, status=status)
        tally = s.get(EvaluationTally, key, with_for_update=True)
        if tally is not None:
            tally.n -= n
            if tally.n <= 0:
                s.delete(tally)
    s.flush()
    doomed = select(Evaluation.id).where(Evaluation.solution_id.in_(ids))
    orphaned = list(s.scalars(select(EvaluationTally).where(EvaluationTally.best_id.in_(doomed))))
    for tally in orphaned:
        tally.best_id = None
    s.flush()
    return orphaned


def _remove(s: Session, ids: list[int], keep: Callable[[int], bool]) -> dict[str, int]:
    """Removes these solutions (ids) and what depends on them, in the order the foreign keys need; `keep` tells
    the children that stay (unlinked) from those removed with their parent."""
    orphaned = _untally(s, ids)
    children = s.scalars(select(Solution.id).where(Solution.parent_id.in_(ids))).all()
    counts = {
        "archive_cells": s.execute(delete(ArchiveCell).where(ArchiveCell.solution_id.in_(ids)),
                                   execution_options=_QUIET).rowcount,
        "calls_unlinked": s.execute(update(Generation).where(Generation.solution_id.in_(ids)).values(solution_id=None),
                                    execution_options=_QUIET).rowcount,
        "children_unlinked": sum(map(keep, children)),
    }
    s.execute(update(Solution).where(Solution.parent_id.in_(ids)).values(parent_id=None), execution_options=_QUIET)
    counts["evaluations"] = s.execute(delete(Evaluation).where(Evaluation.solution_id.in_(ids)),
                                      execution_options=_QUIET).rowcount
    s.execute(delete(Solution).where(Solution.id.in_(ids)), execution_options=_QUIET)
    for tally in orphaned:
        rebest(s, tally)
    return counts


def _remove_all(s: Session, ids: list[int], shas: list[str]) -> Removed:
    totals = dict.fromkeys(("evaluations", "archive_cells", "calls_unlinked", "children_unlinked"), 0)
    doomed = set(ids)
    for start in range(0, len(ids), _CHUNK):
        for key, n in _remove(s, ids[start:start + _CHUNK], lambda i: i not in doomed).items():
            totals[key] += n
    return Removed(solutions=shas, **totals)


def _verdicts(s: Session, ids: Iterable[int]) -> dict[int, dict[str, int]]:
    counts: dict[int, dict[str, int]] = {}
    ids = list(ids)
    for start in range(0, len(ids), _CHUNK):
        stmt = (select(Evaluation.solution_id, Evaluation.status, func.count())
                .where(Evaluation.solution_id.in_(ids[start:start + _CHUNK]))
                .group_by(Evaluation.solution_id, Evaluation.status))
        for sid, status, n in s.execute(stmt):
            counts.setdefault(sid, {})[status] = n
    return counts


class Removal:
    """Find solutions by a hash prefix or by their verdicts, and delete them."""

    @guarded
    def solutions_by_prefix(self, prefix: str) -> list[SolutionRow]:
        """Every stored solution whose sha256 starts with prefix (case ignored), in insertion order."""
        stmt = select(Solution).where(Solution.sha256.startswith(prefix.lower(), autoescape=True)).order_by(Solution.id)
        with self.session() as s, s.begin():
            return [solution_row(sol) for sol in s.scalars(stmt)]

    @guarded
    def delete_solutions(self, sha256s: Iterable[str]) -> Removed:
        """Deletes these solutions (full sha256s; unknown ones are skipped) in one transaction, see the module."""
        sha256s = list(sha256s)
        with self.session(write=True) as s, s.begin():
            found = {sha: i for i, sha in s.execute(select(Solution.id, Solution.sha256)
                                                    .where(Solution.sha256.in_(sha256s)))}
            shas = [sha for sha in sha256s if sha in found]
            return _remove_all(s, [found[sha] for sha in shas], shas)

    @guarded
    def prunable(self, statuses: Collection[str], *, problem: str | None = None,
                 unevaluated: bool = False) -> list[SolutionVerdicts]:
        """The solutions prune would delete: every stored verdict of each has one of `statuses` (with
        `unevaluated`, a solution with no verdict too), with its verdicts counted by status."""
        stmt = select(Solution).where(Solution.id.in_(_doomed(statuses, problem, unevaluated))).order_by(Solution.id)
        with self.session() as s, s.begin():
            sols = list(s.scalars(stmt))
            counts = _verdicts(s, (sol.id for sol in sols))
            return [SolutionVerdicts(sha256=sol.sha256, problem=sol.problem.name, path=sol.path,
                                     evaluations_by_status=counts.get(sol.id, {})) for sol in sols]

    @guarded
    def prune(self, statuses: Collection[str], *, problem: str | None = None, unevaluated: bool = False) -> Removed:
        """Deletes what prunable lists, chosen again inside the deleting transaction, so a verdict stored
        meanwhile keeps its solution."""
        with self.session(write=True) as s, s.begin():
            found = s.execute(select(Solution.id, Solution.sha256)
                              .where(Solution.id.in_(_doomed(statuses, problem, unevaluated)))
                              .order_by(Solution.id)).all()
            return _remove_all(s, [i for i, _ in found], [sha for _, sha in found])
