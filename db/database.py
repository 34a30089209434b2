"""The `Database` facade: short atomic transactions over the kforge schema, plain rows out.

SQLite by default (WAL + busy timeout + BEGIN IMMEDIATE for writes, so several evaluator
processes can share one file); any SQLAlchemy URL works, PostgreSQL is tested. Opening a database
brings its schema to the newest alembic revision (db/migrate.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from db import migrate
from db.archive import ArchiveCells
from db.jobs import Jobs
from db.engine import (
    WRITE,
    ConflictError,
    DatabaseError,
    NotFoundError,
    configure_sqlite,
    connect,
    default_path,
    default_url,
    guarded,
    one_line,
    retry_on_conflict,
)
from db.models import Evaluation, Generation, GenerationParent, GenerationReuse, Problem, Solution
from db.rows import (
    EVAL_FIELDS,
    GEN_FIELDS,
    EvaluationRow,
    GenerationRow,
    ProblemRow,
    ReuseRow,
    SolutionRow,
    evaluation_row,
    generation_row,
    problem_row,
    reuse_row,
    solution_row,
)
from db.removal import Removal
from db.runs import Runs
from db.standings import Standings, problem_id_of, tally

ORIGINS = ("seed", "example", "repair", "generated", "submitted")
_EVAL_REQUIRED = frozenset({"status", "device"})
_GEN_REQUIRED = frozenset({"request_hash", "provider", "model", "prompt", "response"})


def _check_fields(name: str, given: Iterable[str], allowed: frozenset[str], required: frozenset[str]) -> None:
    """Typos in **fields would otherwise surface as obscure mapper errors."""
    given = set(given)
    if unknown := given - allowed:
        raise TypeError(f"{name}() got unknown fields: {', '.join(sorted(unknown))}")
    if missing := required - given:
        raise TypeError(f"{name}() missing required fields: {', '.join(sorted(missing))}")


def _fill_blanks(row: Solution, **values: Any) -> None:
    """Later sightings of a solution may know more (its file, its parent); never overwrite."""
    for key, value in values.items():
        if value is not None and getattr(row, key) is None:
            setattr(row, key, value)


_NEWEST_EVAL = (Evaluation.created_at.desc(), Evaluation.id.desc())
_NEWEST_GEN = (Generation.created_at.desc(), Generation.id.desc())


class Database(Standings, Runs, ArchiveCells, Removal, Jobs):
    """Results store of kforge. Every method is one short transaction and returns plain rows."""

    def __init__(self, url: str) -> None:
        self._engine = connect(url)
        self.url = self._engine.url.render_as_string(hide_password=True)
        file = self._engine.url.database if self._engine.dialect.name == "sqlite" else None
        self.created = bool(file) and file != ":memory:" and not Path(file).exists()  # a typo makes a new file
        if self._engine.dialect.name == "sqlite":
            configure_sqlite(self._engine)
        writer = self._engine.execution_options(**{WRITE: True})
        self._readers = sessionmaker(self._engine, expire_on_commit=False)
        self._writers = sessionmaker(writer, expire_on_commit=False)
        self._open(writer)

    def _open(self, writer: Engine) -> None:
        """Fails fast with a readable message rather than at the first query; migrates an older schema, taking
        the write lock only then, so opening an up-to-date database stays a read."""
        try:
            with self._engine.connect() as conn:
                current = migrate.revision(conn)
            if current != migrate.HEAD:
                with writer.begin() as conn:
                    migrate.upgrade(conn)
        except (SQLAlchemyError, migrate.MigrationError) as exc:
            self._engine.dispose()
            raise DatabaseError(f"cannot open database {self.url!r}: {one_line(exc)}") from exc

    @classmethod
    def default(cls) -> Database:
        """The user's database, ~/.kforge/kforge.db (whose directory is created)."""
        default_path().parent.mkdir(parents=True, exist_ok=True)
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

    @guarded
    @retry_on_conflict
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

    @guarded
    @retry_on_conflict
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
        normalized_sha256: str | None = None,
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
                               model=model, seed_id=seed_id, parent_id=parent_id,
                               normalized_sha256=normalized_sha256)  # fmt: skip
                s.add(row)
                s.flush()
            elif row.problem_id != problem_id:
                raise ConflictError(f"solution {sha256!r} is already stored for problem {row.problem.name!r}")
            else:
                _fill_blanks(row, path=path, model=model, seed_id=seed_id, parent_id=parent_id,
                             normalized_sha256=normalized_sha256)
            return row.id

    @guarded
    def get_solution(self, sha256: str) -> SolutionRow | None:
        with self.session() as s, s.begin():
            sol = s.scalar(select(Solution).where(Solution.sha256 == sha256))
            return None if sol is None else solution_row(sol)

    @guarded
    def problems(self) -> list[ProblemRow]:
        """Every registered problem, by level then name."""
        with self.session() as s, s.begin():
            return [problem_row(p) for p in s.scalars(select(Problem).order_by(Problem.level, Problem.name))]

    @guarded
    def solutions(self, problem: str | None = None) -> list[SolutionRow]:
        """Every stored candidate in insertion order, optionally for one problem: reports list them all."""
        stmt = select(Solution).order_by(Solution.id)
        if problem is not None:
            stmt = stmt.where(Solution.problem_id == problem_id_of(problem))
        with self.session() as s, s.begin():
            return [solution_row(sol) for sol in s.scalars(stmt)]

    @guarded
    def solution_lineage(self, sha256: str) -> list[SolutionRow]:
        """The solution, then its parent, grandparent, ... up to the root; [] if unknown."""
        chain: list[SolutionRow] = []
        with self.session() as s, s.begin():
            sol = s.scalar(select(Solution).where(Solution.sha256 == sha256))
            while sol is not None and all(r.id != sol.id for r in chain):  # a cycle would loop forever
                chain.append(solution_row(sol))
                sol = sol.parent
        return chain

    # -- evaluations ---------------------------------------------------------------------------

    @guarded
    @retry_on_conflict
    def add_evaluation(self, solution_sha256: str, **fields: Any) -> int:
        """Stores one verdict and counts it in its tally; fields are Evaluation's columns (status and device
        required)."""
        _check_fields("add_evaluation", fields, EVAL_FIELDS, _EVAL_REQUIRED)
        with self.session(write=True) as s, s.begin():
            sol = self._solution_in(s, solution_sha256)
            row = Evaluation(solution_id=sol.id, **fields)
            s.add(row)
            s.flush()
            tally(s, sol.problem_id, row)
            return row.id

    @guarded
    def find_evaluation(self, solution_sha256: str, device_name: str, size: str, *,
                        precision: str = "fp32") -> EvaluationRow | None:
        """The latest verdict for this code on this device and size at this precision: lets callers skip
        re-evaluating."""
        sol_id = select(Solution.id).where(Solution.sha256 == solution_sha256).scalar_subquery()
        stmt = (
            select(Evaluation)
            .where(Evaluation.solution_id == sol_id, Evaluation.device_name == device_name, Evaluation.size == size,
                   Evaluation.precision == precision)
            .order_by(*_NEWEST_EVAL)
            .limit(1)
        )
        with self.session() as s, s.begin():
            ev = s.scalar(stmt)
            return None if ev is None else evaluation_row(ev)

    @guarded
    def evaluations(self, problem: str | None = None, limit: int | None = None,
                    solution_prefix: str | None = None) -> list[EvaluationRow]:
        """Newest first, optionally for one problem, or for the solutions whose sha256 starts with a prefix (case
        ignored: the index answers, no row of another solution is read)."""
        stmt = select(Evaluation).order_by(*_NEWEST_EVAL).limit(limit)
        if problem is not None:
            of_problem = select(Solution.id).where(Solution.problem_id == problem_id_of(problem))
            stmt = stmt.where(Evaluation.solution_id.in_(of_problem))
        if solution_prefix is not None:
            prefixed = select(Solution.id).where(Solution.sha256.startswith(solution_prefix.lower(), autoescape=True))
            stmt = stmt.where(Evaluation.solution_id.in_(prefixed))
        with self.session() as s, s.begin():
            return [evaluation_row(ev) for ev in s.scalars(stmt)]

    # -- generations ---------------------------------------------------------------------------

    @guarded
    def add_generation(self, *, problem: str, solution_sha256: str | None = None,
                       parent_generation_ids: Sequence[int] = (), **fields: Any) -> int:
        """Stores one LLM call right after it is paid for, so a crash never pays for it twice. Its parents: every
        call its prompt built on, the refined one first (parent_generation_id alone: that one)."""
        _check_fields("add_generation", fields, GEN_FIELDS, _GEN_REQUIRED)
        parents = list(parent_generation_ids) or [p for p in [fields.get("parent_generation_id")] if p is not None]
        fields["parent_generation_id"] = parents[0] if parents else None
        with self.session(write=True) as s, s.begin():
            sol_id = self._solution_in(s, solution_sha256).id if solution_sha256 else None
            row = Generation(problem_id=self._problem_id_in(s, problem), solution_id=sol_id, **fields,
                             parents=[GenerationParent(position=i, parent_generation_id=p) for i, p in enumerate(parents)])
            s.add(row)
            s.flush()
            return row.id

    @guarded
    def find_generation(self, request_hash: str) -> GenerationRow | None:
        """The latest stored response to an identical request (the pipeline's cache)."""
        stmt = select(Generation).where(Generation.request_hash == request_hash).order_by(*_NEWEST_GEN).limit(1)
        with self.session() as s, s.begin():
            gen = s.scalar(stmt)
            return None if gen is None else generation_row(gen)

    @guarded
    def generations(self, problem: str | None = None, limit: int | None = None) -> list[GenerationRow]:
        """Newest first, optionally for one problem."""
        stmt = select(Generation).order_by(*_NEWEST_GEN).limit(limit)
        if problem is not None:
            stmt = stmt.where(Generation.problem_id == problem_id_of(problem))
        with self.session() as s, s.begin():
            return [generation_row(g) for g in s.scalars(stmt)]

    @guarded
    def set_generation_solution(self, generation_id: int, solution_sha256: str) -> None:
        """Links a generation to the candidate extracted from it once that is stored."""
        with self.session(write=True) as s, s.begin():
            gen = s.get(Generation, generation_id)
            if gen is None:
                raise NotFoundError(f"unknown generation id {generation_id}")
            gen.solution_id = self._solution_in(s, solution_sha256).id

    @guarded
    def add_reuse(self, generation_id: int, run_id: int | None = None) -> int:
        """Records that a stored answer was given again instead of a paid call; a run that takes the same answer
        again (resumed) keeps its one row. Its id."""
        with self.session(write=True) as s, s.begin():
            if s.get(Generation, generation_id) is None:
                raise NotFoundError(f"unknown generation id {generation_id}")
            same = select(GenerationReuse.id).where(GenerationReuse.generation_id == generation_id,
                                                    GenerationReuse.run_id == run_id)
            if run_id is not None and (known := s.scalar(same)) is not None:
                return known
            row = GenerationReuse(generation_id=generation_id, run_id=run_id)
            s.add(row)
            s.flush()
            return row.id

    @guarded
    def reuses(self, run_id: int | None = None) -> list[ReuseRow]:
        """Oldest first, optionally of one run."""
        stmt = select(GenerationReuse).order_by(GenerationReuse.id)
        if run_id is not None:
            stmt = stmt.where(GenerationReuse.run_id == run_id)
        with self.session() as s, s.begin():
            return [reuse_row(r) for r in s.scalars(stmt)]
