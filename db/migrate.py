"""Schema migrations (alembic): Database() brings every database it opens to the newest revision.

After changing db/models.py, write the next revision from the repository root (pyproject.toml points alembic at
db/migrations), against a scratch database at the previous head, then review it:
    alembic -x url=sqlite:////tmp/scratch.db upgrade head
    alembic -x url=sqlite:////tmp/scratch.db revision --autogenerate --rev-id 0002 -m "what changed"
"""

from __future__ import annotations

import functools
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, inspect, text

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
FIRST = "0001"  # the schema create_all made before kforge had migrations
_PG_LOCK = 0x6B666F726765  # "kforge": one advisory lock key, so concurrent openers migrate one at a time


def config(connection: Connection | None = None) -> Config:
    """Built in code, not read from an ini file, so migrations work from an installed package."""
    cfg = Config(attributes={"connection": connection})
    cfg.set_main_option("script_location", str(MIGRATIONS).replace("%", "%%"))
    return cfg


@functools.cache
def head() -> str | None:
    return ScriptDirectory.from_config(config()).get_current_head()


def revision(connection: Connection) -> str | None:
    """The stored revision; None for an empty database or one made before migrations."""
    return MigrationContext.configure(connection).get_current_revision()


def upgrade(connection: Connection) -> None:
    """Migrate to head inside the caller's write transaction (BEGIN IMMEDIATE on SQLite; an advisory lock here on
    PostgreSQL), so of several processes opening one database at once, one migrates and the others see it done."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK})
    current = revision(connection)
    if current == head():
        return
    cfg = config(connection)
    if current is None and inspect(connection).has_table("problems"):
        command.stamp(cfg, FIRST)  # tables from the old create_all are revision FIRST: keep them and their rows
    command.upgrade(cfg, "head")
