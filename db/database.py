"""The `Database` facade: short atomic transactions over the kforge schema, plain rows out.

SQLite by default (WAL + busy timeout + BEGIN IMMEDIATE for writes, so several evaluator
processes can share one file); any SQLAlchemy URL works, PostgreSQL is tested. Opening a database
brings its schema to the newest alembic revision (db/migrate.py).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from alembic.util import CommandError
from sqlalchemy import ColumnElement, Engine, create_engine, distinct, event, func, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, NoSuchModuleError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from db import migrate
from db.models import Evaluation, EvaluationTally, Generation, Problem, Solution
from db.rows import EvaluationRow, GenerationRow, LeaderRow, ProblemRow, SolutionRow

CORRECT = "correct"
ORIGINS = ("seed", "example", "repair", "generated", "submitted")
BUSY_TIMEOUT_MS = 30_000
_WRITE = "kforge_write"  # execution option: begin SQLite transactions with BEGIN IMMEDIATE

_EVAL_FIELDS = frozenset(c.key for c in Evaluation.__table__.columns) - {"id", "solution_id"}
_EVAL_REQUIRED = frozenset({"status", "device"})
_GEN_FIELDS = frozenset(c.key for c in Generation.__table__.columns) - {"id", "problem_id", "solution_id"}
_GEN_REQUIRED = frozenset({"request_hash", "provider", "model", "prompt", "response"})

P = ParamSpec("P")
T = TypeVar("T")


class DatabaseError(Exception):
    """The database cannot be opened or used; the message is one line meant for a human."""


class NotFoundError(DatabaseError, LookupError):
    """A referenced problem, solution or generation is not stored."""


class ConflictError(DatabaseError, ValueError):
    """A write contradicts what is stored (e.g. one source hash filed under two problems)."""


def default_url() -> str:
    """The user's SQLite file under ~/.kforge (the app decides when to use another URL: db reads no environment)."""
    return f"sqlite:///{_default_path()}"


def _default_path() -> Path:
    return Path.home() / ".kforge" / "kforge.db"


def _one_line(exc: BaseException) -> str:
    """First line of the driver's own message: SQLAlchemy's wrapper adds SQL and links."""
    orig = getattr(exc, "orig", None)
    lines = str(orig if orig is not None else exc).strip().splitlines()
    return lines[0].strip() if lines else type(exc).__name__


def _create_engine(url: str) -> Engine:
    """Builds the engine, turning URL and driver problems into one-line DatabaseErrors."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise DatabaseError(
            f"invalid database URL {url!r}: cannot parse it "
            "(expected e.g. sqlite:///path/to/kforge.db or postgresql+psycopg://user@host/dbname)"
        ) from exc
    shown = parsed.render_as_string(hide_password=True)
    try:
        return create_engine(parsed)
    except NoSuchModuleError as exc:
        raise DatabaseError(f"invalid database URL {shown!r}: unknown dialect {parsed.drivername!r}") from exc
    except ImportError as exc:
        raise DatabaseError(f"missing database driver for {shown!r}: {exc} (install it with pip)") from exc
    except ArgumentError as exc:
        raise DatabaseError(f"invalid database URL {shown!r}: {_one_line(exc)}") from exc


def _configure_sqlite(engine: Engine) -> None:
    """WAL lets readers run beside a writer; BEGIN IMMEDIATE makes writers queue on the busy
    timeout at BEGIN instead of failing with 'database is locked' when upgrading a read lock."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # sqlite3 must not emit BEGIN itself: _on_begin does
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(_WRITE) else "BEGIN")


def _guarded(fn: Callable[P, T]) -> Callable[P, T]:
    """Driver failures mid-run (locked past the timeout, disk full, server gone) become DatabaseErrors."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        except OperationalError as exc:
            raise DatabaseError(f"database {args[0].url!r}: {_one_line(exc)}") from exc  # type: ignore[attr-defined]

    return wrapper


def _retry_on_conflict(fn: Callable[P, T]) -> Callable[P, T]:
    """An upsert can lose an insert race to another process (Postgres); the retry finds its row."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        except IntegrityError:
            return fn(*args, **kwargs)

    return wrapper


def _check_fields(name: str, given: Iterable[str], allowed: frozenset[str], required: frozenset[str]) -> None:
    """Typos in **fields would otherwise surface as obscure mapper errors."""
    given = set(given)
    if unknown := given - allowed:
        raise TypeError(f"{name}() got unknown fields: {', '.join(sorted(unknown))}")
    if missing := required - given:
        raise TypeError(f"{name}() missing required fields: {', '.join(sorted(missing))}")


def _problem_id(problem: str) -> Any:
    return select(Problem.id).where(Problem.name == problem).scalar_subquery()


def _tally_filters(problem: str | None, device_name: str | None, size: str | None) -> list[ColumnElement[bool]]:
    """WHERE clauses shared by the aggregate queries, which all read EvaluationTally."""
    where: list[ColumnElement[bool]] = []
    if problem is not None:
        where.append(EvaluationTally.problem_id == _problem_id(problem))
    if device_name is not None:
        where.append(EvaluationTally.device_name == device_name)
    if size is not None:
        where.append(EvaluationTally.size == size)
    return where


def _problem_row(problem: Problem) -> ProblemRow:
    return ProblemRow.model_validate(problem, from_attributes=True)


def _solution_row(sol: Solution) -> SolutionRow:
    parent = sol.parent.sha256 if sol.parent is not None else None
    cols = {k: getattr(sol, k) for k in ("id", "sha256", "path", "source", "origin", "model", "seed_id", "created_at")}
    return SolutionRow(problem=sol.problem.name, parent_sha256=parent, **cols)


def _evaluation_row(ev: Evaluation) -> EvaluationRow:
    sol = ev.solution
    cols = {k: getattr(ev, k) for k in _EVAL_FIELDS}
    return EvaluationRow(
        id=ev.id, solution_sha256=sol.sha256, solution_path=sol.path, problem=sol.problem.name, model=sol.model, **cols
    )


def _generation_row(gen: Generation) -> GenerationRow:
    cols = {k: getattr(gen, k) for k in _GEN_FIELDS}
    sha = gen.solution.sha256 if gen.solution is not None else None
    return GenerationRow(id=gen.id, problem=gen.problem.name, solution_sha256=sha, **cols)


def _leader_row(problem: Problem, n_solutions: int, counts: dict[str, int], best: Evaluation | None) -> LeaderRow:
    row = LeaderRow(
        problem=problem.name,
        level=problem.level,
        n_solutions=n_solutions,
        n_evaluations=sum(counts.values()),
        status_counts=counts,
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
            candidate_ms=best.candidate_ms,
            reference_ms=best.reference_ms,
            speedup_vs_compile=best.speedup_vs_compile,
        )
    )


def _fill_blanks(row: Solution, **values: Any) -> None:
    """Later sightings of a solution may know more (its file, its parent); never overwrite."""
    for key, value in values.items():
        if value is not None and getattr(row, key) is None:
            setattr(row, key, value)


_RANKED = (Evaluation.status == CORRECT, Evaluation.speedup > 0)  # the evaluations that can be a problem's best
_BEST = (Evaluation.speedup.desc(), Evaluation.created_at, Evaluation.id)  # the highest speedup, earliest on ties


def _tally(s: Session, problem_id: int, ev: Evaluation) -> None:
    """Counts a new evaluation in its tally and keeps the tally's best. FOR UPDATE makes concurrent writers to one
    tally queue on PostgreSQL instead of losing counts (SQLite writers queue at BEGIN IMMEDIATE already); two first
    writers both inserting the tally make one fail on its primary key, and _retry_on_conflict runs it again."""
    tally = s.get(EvaluationTally, (problem_id, ev.device_name, ev.size, ev.status), with_for_update=True)
    if tally is None:
        tally = EvaluationTally(problem_id=problem_id, device_name=ev.device_name, size=ev.size, status=ev.status, n=0)
        s.add(tally)
    tally.n += 1
    rivals = [i for i in (tally.best_id, ev.id) if i is not None]
    tally.best_id = s.scalar(select(Evaluation.id).where(Evaluation.id.in_(rivals), *_RANKED).order_by(*_BEST).limit(1))


_NEWEST_EVAL = (Evaluation.created_at.desc(), Evaluation.id.desc())
_NEWEST_GEN = (Generation.created_at.desc(), Generation.id.desc())


class Database:
    """Results store of kforge. Every method is one short transaction and returns plain rows."""

    def __init__(self, url: str) -> None:
        self._engine = _create_engine(url)
        self.url = self._engine.url.render_as_string(hide_password=True)
        file = self._engine.url.database if self._engine.dialect.name == "sqlite" else None
        self.created = bool(file) and file != ":memory:" and not Path(file).exists()  # a typo makes a new file
        if self._engine.dialect.name == "sqlite":
            _configure_sqlite(self._engine)
        writer = self._engine.execution_options(**{_WRITE: True})
        self._readers = sessionmaker(self._engine, expire_on_commit=False)
        self._writers = sessionmaker(writer, expire_on_commit=False)
        self._open(writer)

    def _open(self, writer: Engine) -> None:
        """Fails fast with a readable message rather than at the first query; migrates an older schema, taking
        the write lock only then, so opening an up-to-date database stays a read."""
        try:
            with self._engine.connect() as conn:
                current = migrate.revision(conn)
            if current != migrate.head():
                with writer.begin() as conn:
                    migrate.upgrade(conn)
        except (SQLAlchemyError, CommandError) as exc:
            self._engine.dispose()
            raise DatabaseError(f"cannot open database {self.url!r}: {_one_line(exc)}") from exc

    @classmethod
    def default(cls) -> Database:
        """The user's database, ~/.kforge/kforge.db (whose directory is created)."""
        _default_path().parent.mkdir(parents=True, exist_ok=True)
        return cls(default_url())

    def session(self, write: bool = False) -> Session:
        """A new session; write=True takes SQLite's write lock at BEGIN (see _configure_sqlite)."""
        return (self._writers if write else self._readers)()

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Database({self.url!r})"

    # -- lookups used inside a transaction ---------------------------------------------------

    @staticmethod
    def _problem_id_in(s: Session, name: str) -> int:
        pid = s.scalar(select(Problem.id).where(Problem.name == name))
        if pid is None:
            raise NotFoundError(f"unknown problem {name!r}: store it with upsert_problem first")
        return pid

    @staticmethod
    def _solution_in(s: Session, sha256: str) -> Solution:
        sol = s.scalar(select(Solution).where(Solution.sha256 == sha256))
        if sol is None:
            raise NotFoundError(f"unknown solution {sha256!r}: store it with upsert_solution first")
        return sol

    # -- problems and solutions ----------------------------------------------------------------

    @_guarded
    @_retry_on_conflict
    def upsert_problem(self, name: str, level: int, path: str, sha256: str) -> int:
        """Problems are re-registered on every run; keep one row per name, refreshed."""
        with self.session(write=True) as s, s.begin():
            row = s.scalar(select(Problem).where(Problem.name == name))
            if row is None:
                row = Problem(name=name, level=level, path=str(path), sha256=sha256)
                s.add(row)
                s.flush()
            else:
                row.level, row.path, row.sha256 = level, str(path), sha256
            return row.id

    @_guarded
    @_retry_on_conflict
    def upsert_solution(
        self,
        sha256: str,
        problem_name: str,
        source: str,
        path: str | None = None,
        origin: str = "submitted",
        model: str | None = None,
        seed_id: str | None = None,
        parent_sha256: str | None = None,
    ) -> int:
        """One row per source hash, so re-submitting the same code reuses its evaluations."""
        if origin not in ORIGINS:
            raise ValueError(f"origin must be one of {', '.join(ORIGINS)}, not {origin!r}")
        if parent_sha256 == sha256:
            raise ConflictError(f"solution {sha256!r} cannot be its own parent")
        path = None if path is None else str(path)
        with self.session(write=True) as s, s.begin():
            problem_id = self._problem_id_in(s, problem_name)
            parent_id = self._solution_in(s, parent_sha256).id if parent_sha256 else None
            row = s.scalar(select(Solution).where(Solution.sha256 == sha256))
            if row is None:
                row = Solution(sha256=sha256, problem_id=problem_id, source=source, path=path, origin=origin,
                               model=model, seed_id=seed_id, parent_id=parent_id)  # fmt: skip
                s.add(row)
                s.flush()
            elif row.problem_id != problem_id:
                raise ConflictError(f"solution {sha256!r} is already stored for problem {row.problem.name!r}")
            else:
                _fill_blanks(row, path=path, model=model, seed_id=seed_id, parent_id=parent_id)
            return row.id

    @_guarded
    def get_solution(self, sha256: str) -> SolutionRow | None:
        with self.session() as s, s.begin():
            sol = s.scalar(select(Solution).where(Solution.sha256 == sha256))
            return None if sol is None else _solution_row(sol)

    @_guarded
    def problems(self) -> list[ProblemRow]:
        """Every registered problem, by level then name."""
        with self.session() as s, s.begin():
            return [_problem_row(p) for p in s.scalars(select(Problem).order_by(Problem.level, Problem.name))]

    @_guarded
    def solutions(self, problem: str | None = None) -> list[SolutionRow]:
        """Every stored candidate in insertion order, optionally for one problem: reports list them all."""
        stmt = select(Solution).order_by(Solution.id)
        if problem is not None:
            stmt = stmt.where(Solution.problem_id == _problem_id(problem))
        with self.session() as s, s.begin():
            return [_solution_row(sol) for sol in s.scalars(stmt)]

    @_guarded
    def solution_lineage(self, sha256: str) -> list[SolutionRow]:
        """The solution, then its parent, grandparent, ... up to the root; [] if unknown."""
        chain: list[SolutionRow] = []
        with self.session() as s, s.begin():
            sol = s.scalar(select(Solution).where(Solution.sha256 == sha256))
            while sol is not None and all(r.id != sol.id for r in chain):  # a cycle would loop forever
                chain.append(_solution_row(sol))
                sol = sol.parent
        return chain

    # -- evaluations ---------------------------------------------------------------------------

    @_guarded
    @_retry_on_conflict
    def add_evaluation(self, solution_sha256: str, **fields: Any) -> int:
        """Stores one verdict and counts it in its tally; fields are Evaluation's columns (status and device
        required)."""
        _check_fields("add_evaluation", fields, _EVAL_FIELDS, _EVAL_REQUIRED)
        with self.session(write=True) as s, s.begin():
            sol = self._solution_in(s, solution_sha256)
            row = Evaluation(solution_id=sol.id, **fields)
            s.add(row)
            s.flush()
            _tally(s, sol.problem_id, row)
            return row.id

    @_guarded
    def find_evaluation(self, solution_sha256: str, device_name: str, size: str) -> EvaluationRow | None:
        """The latest verdict for this code on this device: lets callers skip re-evaluating."""
        sol_id = select(Solution.id).where(Solution.sha256 == solution_sha256).scalar_subquery()
        stmt = (
            select(Evaluation)
            .where(Evaluation.solution_id == sol_id, Evaluation.device_name == device_name, Evaluation.size == size)
            .order_by(*_NEWEST_EVAL)
            .limit(1)
        )
        with self.session() as s, s.begin():
            ev = s.scalar(stmt)
            return None if ev is None else _evaluation_row(ev)

    @_guarded
    def evaluations(self, problem: str | None = None, limit: int | None = None) -> list[EvaluationRow]:
        """Newest first, optionally for one problem."""
        stmt = select(Evaluation).order_by(*_NEWEST_EVAL).limit(limit)
        if problem is not None:
            of_problem = select(Solution.id).where(Solution.problem_id == _problem_id(problem))
            stmt = stmt.where(Evaluation.solution_id.in_(of_problem))
        with self.session() as s, s.begin():
            return [_evaluation_row(ev) for ev in s.scalars(stmt)]

    # -- aggregates ----------------------------------------------------------------------------

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

    @_guarded
    def leaderboard(
        self, problem: str | None = None, *, device_name: str | None = None, size: str | None = None
    ) -> list[LeaderRow]:
        """One row per problem that has solutions, by level then name: best correct speedup over
        all matching evaluations, evaluation counts by status, and the number of solutions."""
        where = _tally_filters(problem, device_name, size)
        stmt = select(Problem, func.count(Solution.id)).join(Solution, Solution.problem_id == Problem.id)
        if problem is not None:
            stmt = stmt.where(Problem.name == problem)
        stmt = stmt.group_by(Problem.id).order_by(Problem.level, Problem.name)
        with self.session() as s, s.begin():
            best, counts = self._best(s, where), self._status_counts(s, where)
            return [_leader_row(p, n, counts.get(p.id, {}), best.get(p.id)) for p, n in s.execute(stmt)]

    def _best_speedups(self, where: list[ColumnElement[bool]]) -> tuple[int, list[float]]:
        """(number of problems with matching evaluations, their best correct speedups)."""
        n_stmt = select(func.count(distinct(EvaluationTally.problem_id))).where(*where)
        with self.session() as s, s.begin():
            return s.scalar(n_stmt) or 0, [ev.speedup for ev in self._best(s, where).values()]

    @_guarded
    def problem_fast_p(
        self,
        thresholds: Iterable[float] = (0, 1, 1.5, 2),
        problem: str | None = None,
        *,
        device_name: str | None = None,
        size: str | None = None,
    ) -> dict[float, float]:
        """fast_p over problems: the fraction of evaluated problems whose best correct solution has speedup > p
        (best-of-k; KernelBench's per-sample fast_p is kforge.kernelbench.fast_p, and the two agree when every
        problem has one sample). Correct runs without a timed speedup do not count. {} if nothing is evaluated."""
        n, best = self._best_speedups(_tally_filters(problem, device_name, size))
        if n == 0:
            return {}
        return {float(p): sum(b > p for b in best) / n for p in thresholds}

    @_guarded
    def geomean_speedup(
        self, problem: str | None = None, *, device_name: str | None = None, size: str | None = None
    ) -> float | None:
        """Geometric mean of the per-problem best correct speedups; None when there are none."""
        _, best = self._best_speedups(_tally_filters(problem, device_name, size))
        return math.exp(math.fsum(map(math.log, best)) / len(best)) if best else None

    @_guarded
    def latest_verdicts(self, problem: str | None = None, level: int | None = None) -> list[tuple[str, float | None]]:
        """(status, speedup) of the latest stored evaluation of each solution on each device and size, however often
        it was rerun (ids grow as rows are stored). Reads one index entry per evaluation (~0.6 s for 1M on SQLite)."""
        latest = select(func.max(Evaluation.id).label("id"))
        if problem is not None or level is not None:
            latest = latest.join(Solution, Evaluation.solution_id == Solution.id).join(Problem, Solution.problem_id == Problem.id)
            latest = latest.where(*([Problem.name == problem] if problem is not None else []),
                                  *([Problem.level == level] if level is not None else []))
        latest = latest.group_by(Evaluation.solution_id, Evaluation.device_name, Evaluation.size).subquery()
        stmt = select(Evaluation.status, Evaluation.speedup).join(latest, Evaluation.id == latest.c.id)
        with self.session() as s, s.begin():
            return [(status, speedup) for status, speedup in s.execute(stmt)]

    # -- generations ---------------------------------------------------------------------------

    @_guarded
    def add_generation(self, *, problem: str, solution_sha256: str | None = None, **fields: Any) -> int:
        """Stores one LLM call right after it is paid for, so a crash never pays for it twice."""
        _check_fields("add_generation", fields, _GEN_FIELDS, _GEN_REQUIRED)
        with self.session(write=True) as s, s.begin():
            sol_id = self._solution_in(s, solution_sha256).id if solution_sha256 else None
            row = Generation(problem_id=self._problem_id_in(s, problem), solution_id=sol_id, **fields)
            s.add(row)
            s.flush()
            return row.id

    @_guarded
    def find_generation(self, request_hash: str) -> GenerationRow | None:
        """The latest stored response to an identical request (the pipeline's cache)."""
        stmt = select(Generation).where(Generation.request_hash == request_hash).order_by(*_NEWEST_GEN).limit(1)
        with self.session() as s, s.begin():
            gen = s.scalar(stmt)
            return None if gen is None else _generation_row(gen)

    @_guarded
    def generations(self, problem: str | None = None, limit: int | None = None) -> list[GenerationRow]:
        """Newest first, optionally for one problem."""
        stmt = select(Generation).order_by(*_NEWEST_GEN).limit(limit)
        if problem is not None:
            stmt = stmt.where(Generation.problem_id == _problem_id(problem))
        with self.session() as s, s.begin():
            return [_generation_row(g) for g in s.scalars(stmt)]

    @_guarded
    def set_generation_solution(self, generation_id: int, solution_sha256: str) -> None:
        """Links a generation to the candidate extracted from it once that is stored."""
        with self.session(write=True) as s, s.begin():
            gen = s.get(Generation, generation_id)
            if gen is None:
                raise NotFoundError(f"unknown generation id {generation_id}")
            gen.solution_id = self._solution_in(s, solution_sha256).id
