"""Schema migrations on SQLite and PostgreSQL: every way a database can be found (empty, made by the old
create_all, at an older revision, at an unknown newer one, opened by many processes at once) ends at head."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import create_engine, text

from db import Database, DatabaseError, migrate

REPO = Path(__file__).resolve().parents[1]


def run_on(url: str, action, *args) -> None:
    """An alembic command on its own connection, as a developer (or an older kforge) would have run it."""
    engine = create_engine(url)
    with engine.begin() as conn:
        action(migrate.config(conn), *args)
    engine.dispose()


def sql(url: str, statement: str) -> list[tuple]:
    engine = create_engine(url)
    with engine.begin() as conn:
        result = conn.execute(text(statement))
        rows = [tuple(r) for r in result] if result.returns_rows else []
    engine.dispose()
    return rows


def test_new_database_is_at_head_with_no_drift(url: str) -> None:
    Database(url).close()
    assert sql(url, "SELECT version_num FROM alembic_version") == [(migrate.head(),)]
    env = {**os.environ, "KFORGE_DB": url}  # the developer's `alembic check`, through pyproject.toml and env.py
    check = subprocess.run([sys.executable, "-m", "alembic", "check"], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    assert check.returncode == 0, check.stderr
    assert "No new upgrade operations detected" in check.stdout


@pytest.mark.parametrize("made_by", ["create_all", "alembic"])
def test_first_schema_with_rows_is_upgraded_to_head(url: str, made_by: str) -> None:
    """create_all made revision FIRST without an alembic_version table: it is stamped, then upgraded."""
    run_on(url, command.upgrade, migrate.FIRST)
    if made_by == "create_all":
        sql(url, "DROP TABLE alembic_version")
    sql(url, "INSERT INTO problems (name, level, path, sha256, created_at) VALUES ('relu', 1, 'p', 'h', '2024-01-01')")
    with Database(url) as db:
        assert db.upsert_problem("relu", 1, "p", "h") == 1  # the old row, not a new one
    assert sql(url, "SELECT version_num FROM alembic_version") == [(migrate.head(),)]


def test_downgrade_to_nothing_and_back(url: str) -> None:
    Database(url).close()
    run_on(url, command.downgrade, "base")
    assert sql(url, "SELECT count(*) FROM alembic_version") == [(0,)]
    with Database(url) as db:
        assert db.upsert_problem("relu", 1, "p", "h") == 1


def test_unknown_newer_revision_is_a_one_line_error(url: str) -> None:
    Database(url).close()
    sql(url, "UPDATE alembic_version SET version_num = 'f00d'")
    with pytest.raises(DatabaseError, match=r"^cannot open database .*Can't locate revision identified by 'f00d'"):
        Database(url)


def test_many_processes_opening_a_new_database(url: str) -> None:
    """One of them creates the schema; the others wait for it instead of failing on 'table already exists'."""
    opener = "import sys; from db import Database; Database(sys.argv[1]).upsert_problem('relu', 1, 'p', 'h')"
    procs = [subprocess.Popen([sys.executable, "-c", opener, url], cwd=REPO) for _ in range(8)]
    assert [p.wait(120) for p in procs] == [0] * 8
    assert sql(url, "SELECT version_num FROM alembic_version") == [(migrate.head(),)]
    assert sql(url, "SELECT count(*) FROM problems") == [(1,)]
