"""Schema migrations (alembic): Database() brings every database it opens to the newest revision.

After changing db/models.py, write the next revision from the repository root (pyproject.toml points alembic at
db/migrations), against a scratch database at the previous head, then review it:
    alembic -x url=sqlite:////tmp/scratch.db upgrade head
    alembic -x url=sqlite:////tmp/scratch.db revision --autogenerate --rev-id 0002 -m "what changed"
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Connection, inspect, text

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
FIRST = "0001"  # the schema create_all made before kforge had migrations
HEAD = "0008"  # the newest revision in migrations/versions (tests/test_migrations.py checks it against alembic's)
_PG_LOCK = 0x6B666F726765  # "kforge": one advisory lock key, so concurrent openers migrate one at a time


class MigrationError(Exception):
    """alembic could not bring the schema to HEAD (its own CommandError, in words)."""


def config(connection: Connection | None = None):
    """Built in code, not read from an ini file, so migrations work from an installed package. alembic is imported
    only to migrate: opening an up-to-date database (every command but the first) needs none of it."""
    from alembic.config import Config

    cfg = Config(attributes={"connection": connection})
    cfg.set_main_option("script_location", str(MIGRATIONS).replace("%", "%%"))
    return cfg


def revision(connection: Connection) -> str | None:
    """The stored revision; None for an empty database or one made before migrations."""
    if not inspect(connection).has_table("alembic_version"):
        return None
    return connection.execute(text("SELECT version_num FROM alembic_version")).scalar()


def upgrade(connection: Connection) -> None:
    """Migrate to head inside the caller's write transaction (BEGIN IMMEDIATE on SQLite; an advisory lock here on
    PostgreSQL), so of several processes opening one database at once, one migrates and the others see it done."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK})
    current = revision(connection)
    if current == HEAD:
        return
    from alembic import command
    from alembic.util import CommandError

    cfg = config(connection)
    try:
        if current is None and inspect(connection).has_table("problems"):
            command.stamp(cfg, FIRST)  # tables from the old create_all are revision FIRST: keep them and their rows
        command.upgrade(cfg, "head")
    except CommandError as exc:
        raise MigrationError(str(exc)) from exc
