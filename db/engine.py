"""Connecting: URLs and drivers turned into one-line errors, SQLite's pragmas for several writers, and the
wrappers that make driver failures mid-run readable. Knows the schema only through nothing: any URL, any dialect."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, NoSuchModuleError, OperationalError

BUSY_TIMEOUT_MS = 30_000
WRITE = "kforge_write"  # execution option: begin SQLite transactions with BEGIN IMMEDIATE

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
    return f"sqlite:///{default_path()}"


def default_path() -> Path:
    return Path.home() / ".kforge" / "kforge.db"


def one_line(exc: BaseException) -> str:
    """First line of the driver's own message: SQLAlchemy's wrapper adds SQL and links."""
    orig = getattr(exc, "orig", None)
    lines = str(orig if orig is not None else exc).strip().splitlines()
    return lines[0].strip() if lines else type(exc).__name__


def connect(url: str) -> Engine:
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
        raise DatabaseError(f"missing database driver for {shown!r}: {exc} ({_driver_hint(parsed.get_backend_name())})") from exc
    except ArgumentError as exc:
        raise DatabaseError(f"invalid database URL {shown!r}: {one_line(exc)}") from exc


def _driver_hint(backend: str) -> str:
    """How to get the driver: PostgreSQL's is kforge's postgres extra (psycopg); any other is the user's to install."""
    if backend == "postgresql":
        return ("the postgres extra installs psycopg, for postgresql+psycopg:// URLs: "
                "KFORGE_EXTRAS=dev,postgres bash scripts/setup.sh, or pip install -e '.[postgres]'")
    return "install its driver into kforge's venv"


def configure_sqlite(engine: Engine) -> None:
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
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(WRITE) else "BEGIN")


def guarded(fn: Callable[P, T]) -> Callable[P, T]:
    """Driver failures mid-run (locked past the timeout, disk full, server gone) become DatabaseErrors."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        except OperationalError as exc:
            raise DatabaseError(f"database {args[0].url!r}: {one_line(exc)}") from exc  # type: ignore[attr-defined]

    return wrapper


def retry_on_conflict(fn: Callable[P, T]) -> Callable[P, T]:
    """An upsert can lose an insert race to another process (Postgres); the retry finds its row."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        except IntegrityError:
            return fn(*args, **kwargs)

    return wrapper
