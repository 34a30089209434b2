"""Standings: each problem's best correct speedup and its counts by status, kept per (problem, device, size,
precision, status) in EvaluationTally as evaluations are stored, and the aggregates read from it (leaderboard, fast_p over
problems, geomean; their formulas are in db.metrics). A mixin of Database: it needs only `session()` and `url`."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from sqlalchemy import ColumnElement, distinct, exists, func, select
from sqlalchemy.orm import Session, aliased

from db.engine import guarded
from db.metrics import FAST_P, fast_p, geomean
from db.models import Evaluation, EvaluationTally, Problem, Solution
from db.rows import BoardRow, LeaderRow, board_row, leader_row

CORRECT = "correct"  # Status.CORRECT of evaluator.contracts, a floor above: the db stores statuses as strings


def problem_id_of(problem: str) -> Any:
    return select(Problem.id).where(Problem.name == problem).scalar_subquery()


def _tally_filters(problem: str | None, device_name: str | None, size: str | None,
                  precision: str | None) -> list[ColumnElement[bool]]:
    """WHERE clauses shared by the aggregate queries, which all read EvaluationTally."""
    where: list[ColumnElement[bool]] = []
    if problem is not None:
        where.append(EvaluationTally.problem_id == problem_id_of(problem))
    if device_name is not None:
        where.append(EvaluationTally.device_name == device_name)
    if size is not None:
        where.append(EvaluationTally.size == size)
    if precision is not None:
        where.append(EvaluationTally.precision == precision)
    return where


_RANKED = (Evaluation.status == CORRECT, Evaluation.speedup > 0)  # the evaluations that can be a problem's best
_BEST = (Evaluation.speedup.desc(), Evaluation.created_at, Evaluation.id)  # the highest speedup, earliest on ties


def tally(s: Session, problem_id: int, ev: Evaluation) -> None:
    """Counts a new evaluation in its tally and keeps its board's best, among each solution's latest verdict there:
    a new verdict of the best's own solution makes it chosen again (rebest), another correct one is a rival. FOR
    UPDATE makes concurrent writers to one tally queue on PostgreSQL instead of losing counts (SQLite writers queue
    at BEGIN IMMEDIATE already); two first writers both inserting the tally make one fail on its primary key, and
    retry_on_conflict runs it again."""
    key = dict(problem_id=problem_id, device_name=ev.device_name, size=ev.size, precision=ev.precision, status=ev.status)
    tally = s.get(EvaluationTally, key, with_for_update=True)
    if tally is None:
        tally = EvaluationTally(**key, n=0)
        s.add(tally)
    tally.n += 1
    ranked = tally if ev.status == CORRECT else s.get(EvaluationTally, {**key, "status": CORRECT}, with_for_update=True)
    if ranked is None:
        return
    if ranked.best_id is not None and s.get(Evaluation, ranked.best_id).solution_id == ev.solution_id:
        rebest(s, ranked)
    elif ev.status == CORRECT:
        rivals = [i for i in (ranked.best_id, ev.id) if i is not None]
        ranked.best_id = s.scalar(select(Evaluation.id).where(Evaluation.id.in_(rivals), *_RANKED).order_by(*_BEST).limit(1))


def rebest(s: Session, tally: EvaluationTally) -> None:
    """The tally's best chosen again among its board's latest verdicts (each solution's highest id there): a
    solution whose latest verdict is not correct is no board's best, whatever it was before."""
    later = aliased(Evaluation)
    superseded = exists().where(later.solution_id == Evaluation.solution_id, later.device_name == Evaluation.device_name,
                                later.size == Evaluation.size, later.precision == Evaluation.precision,
                                later.id > Evaluation.id)
    tally.best_id = s.scalar(
        select(Evaluation.id).join(Solution, Solution.id == Evaluation.solution_id)
        .where(Solution.problem_id == tally.problem_id, Evaluation.device_name == tally.device_name,
               Evaluation.size == tally.size, Evaluation.precision == tally.precision,
               Evaluation.status == tally.status, *_RANKED, ~superseded)
        .order_by(*_BEST).limit(1))


def _with_solutions(s: Session, problem: str | None) -> list[tuple[Problem, int]]:
    """Every problem with stored solutions (or the one named), with how many, by level then name."""
    stmt = select(Problem, func.count(Solution.id)).join(Solution, Solution.problem_id == Problem.id)
    if problem is not None:
        stmt = stmt.where(Problem.name == problem)
    return [(p, n) for p, n in s.execute(stmt.group_by(Problem.id).order_by(Problem.level, Problem.name))]


def _latest_counts(s: Session, problem: str | None, precision: str) -> dict[tuple[int, str, str], dict[str, int]]:
    """Per (problem id, device name, size): how many solutions have each status as their latest verdict there
    (the highest id, as latest_verdicts reads it)."""
    latest = select(func.max(Evaluation.id).label("id")).where(Evaluation.precision == precision)
    if problem is not None:
        latest = latest.where(Evaluation.solution_id.in_(select(Solution.id).where(Solution.problem_id == problem_id_of(problem))))
    latest = latest.group_by(Evaluation.solution_id, Evaluation.device_name, Evaluation.size).subquery()
    stmt = (select(Solution.problem_id, Evaluation.device_name, Evaluation.size, Evaluation.status, func.count())
            .join(latest, Evaluation.id == latest.c.id).join(Solution, Solution.id == Evaluation.solution_id)
            .group_by(Solution.problem_id, Evaluation.device_name, Evaluation.size, Evaluation.status))
    counts: dict[tuple[int, str, str], dict[str, int]] = {}
    for pid, device_name, size, status, n in s.execute(stmt):
        counts.setdefault((pid, device_name, size), {})[status] = n
    return counts


class Standings:
    """The read side of the tallies."""

    @staticmethod
    def _best(s: Session, where: list[ColumnElement[bool]]) -> dict[int, Evaluation]:
        """Per problem id, the correct evaluation with the highest speedup (earliest on ties): the best of its
        matching tallies' bests."""
        ranked = (
            select(
                Evaluation.id.label("eid"),
                EvaluationTally.problem_id.label("pid"),
                func.row_number().over(partition_by=EvaluationTally.problem_id, order_by=_BEST).label("rank"),
            )
            .join(Evaluation, Evaluation.id == EvaluationTally.best_id)
            .where(*where)
            .subquery()
        )
        stmt = select(ranked.c.pid, Evaluation).join(Evaluation, Evaluation.id == ranked.c.eid)
        stmt = stmt.where(ranked.c.rank == 1)
        return {pid: ev for pid, ev in s.execute(stmt)}

    @staticmethod
    def _status_counts(s: Session, where: list[ColumnElement[bool]]) -> dict[int, dict[str, int]]:
        stmt = (
            select(EvaluationTally.problem_id, EvaluationTally.status, func.sum(EvaluationTally.n))
            .where(*where)
            .group_by(EvaluationTally.problem_id, EvaluationTally.status)
        )
        counts: dict[int, dict[str, int]] = {}
        for pid, status, n in s.execute(stmt):
            counts.setdefault(pid, {})[status] = n
        return counts

    @guarded
    def leaderboard(
        self, problem: str | None = None, *, device_name: str | None = None, size: str | None = None,
        precision: str | None = None,
    ) -> list[LeaderRow]:
        """One row per problem that has solutions, by level then name: best correct speedup over
        all matching evaluations, evaluation counts by status, and the number of solutions."""
        where = _tally_filters(problem, device_name, size, precision)
        with self.session() as s, s.begin():
            best, counts = self._best(s, where), self._status_counts(s, where)
            return [leader_row(p, n, counts.get(p.id, {}), best.get(p.id)) for p, n in _with_solutions(s, problem)]

    @guarded
    def boards(self, problem: str | None = None, *, precision: str = "fp32") -> list[BoardRow]:
        """The leaderboard at one precision with a row per problem and board (device and size) it was judged on, so
        a speedup is never read apart from where it was measured: full size first, then by device. Each row also
        counts the problem's solutions once each by their latest verdict on its board (solutions_by_status), the
        samples KernelBench's fast_p counts. A problem with solutions but no verdict at this precision has one row
        with no device."""
        with self.session() as s, s.begin():
            problems = _with_solutions(s, problem)
            keys = s.execute(select(EvaluationTally.device_name, EvaluationTally.size).distinct()
                             .where(*_tally_filters(problem, None, None, precision))).all()
            latest = _latest_counts(s, problem, precision)
            rows = []
            for device_name, size in sorted(keys, key=lambda k: (k[1] != "full", k)):
                where = _tally_filters(problem, device_name, size, precision)
                best, counts = self._best(s, where), self._status_counts(s, where)
                rows += [board_row(leader_row(p, n, counts[p.id], best.get(p.id)), device_name, size, precision,
                                   latest.get((p.id, device_name, size), {})) for p, n in problems if p.id in counts]
            judged = {r.problem for r in rows}
            rows += [board_row(leader_row(p, n, {}, None), None, None, precision, {})
                     for p, n in problems if p.name not in judged]
        order = {p.name: i for i, (p, _) in enumerate(problems)}
        return sorted(rows, key=lambda r: order[r.problem])  # stable: each problem's boards stay in board order

    def _best_speedups(self, where: list[ColumnElement[bool]]) -> tuple[int, list[float]]:
        """(number of problems with matching evaluations, their best correct speedups)."""
        n_stmt = select(func.count(distinct(EvaluationTally.problem_id))).where(*where)
        with self.session() as s, s.begin():
            return s.scalar(n_stmt) or 0, [ev.speedup for ev in self._best(s, where).values()]

    @guarded
    def problem_fast_p(
        self,
        thresholds: Iterable[float] = FAST_P,
        problem: str | None = None,
        *,
        device_name: str | None = None,
        size: str | None = None,
        precision: str | None = None,
    ) -> dict[float, float]:
        """fast_p over problems (best-of-k, db.metrics): the fraction of evaluated problems whose best correct
        solution has speedup > p. Correct runs without a timed speedup do not count. {} if nothing is evaluated."""
        n, best = self._best_speedups(_tally_filters(problem, device_name, size, precision))
        return fast_p(best, n, thresholds)

    @guarded
    def geomean_speedup(
        self, problem: str | None = None, *, device_name: str | None = None, size: str | None = None,
        precision: str | None = None,
    ) -> float | None:
        """Geometric mean of the per-problem best correct speedups; None when there are none."""
        return geomean(self._best_speedups(_tally_filters(problem, device_name, size, precision))[1])

    @guarded
    def latest_verdicts(self, problem: str | None = None, level: int | None = None, precision: str | None = None,
                        problems: Collection[str] | None = None) -> list[tuple[str, float | None]]:
        """(status, speedup) of the latest stored evaluation of each solution on each device and size (at
        `precision`, or at each), however often it was rerun (ids grow as rows are stored), of the named `problems`
        only when given (a suite's). Reads one index entry per evaluation (~0.6 s for 1M on SQLite)."""
        latest = select(func.max(Evaluation.id).label("id"))
        if precision is not None:
            latest = latest.where(Evaluation.precision == precision)
        if problem is not None or level is not None or problems is not None:
            latest = latest.join(Solution, Evaluation.solution_id == Solution.id).join(Problem, Solution.problem_id == Problem.id)
            latest = latest.where(*([Problem.name == problem] if problem is not None else []),
                                  *([Problem.level == level] if level is not None else []),
                                  *([Problem.name.in_(problems)] if problems is not None else []))
        latest = latest.group_by(Evaluation.solution_id, Evaluation.device_name, Evaluation.size,
                                 Evaluation.precision).subquery()
        stmt = select(Evaluation.status, Evaluation.speedup).join(latest, Evaluation.id == latest.c.id)
        with self.session() as s, s.begin():
            return [(status, speedup) for status, speedup in s.execute(stmt)]
