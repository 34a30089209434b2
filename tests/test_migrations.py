"""Schema migrations on SQLite and PostgreSQL: every way a database can be found (empty, made by the old
create_all, at an older revision, at an unknown newer one, opened by many processes at once) ends at head."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import MetaData, Table, create_engine, text
from sqlalchemy.exc import DBAPIError

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


def insert_rows(url: str, table: str, rows: list[dict]) -> None:
    """Rows written into a table as it is at the database's revision (reflected: db.models is the newest schema)."""
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(Table(table, MetaData(), autoload_with=conn).insert(), rows)
    engine.dispose()


def old_run(solution_id: int, status: str, speedup: float | None = None, device_name: str = "H100",
            minute: int = 0) -> dict:  # fmt: skip
    """An evaluations row at revision 0001, which had no defaults of its own."""
    return dict(solution_id=solution_id, status=status, cause="", evidence={}, device="cuda", device_name=device_name,
                size="full", speedup=speedup, torch_version="", timings={}, wall_s=0.0,
                created_at=datetime(2024, 1, 1, 0, minute))  # fmt: skip


def test_new_database_is_at_head_with_no_drift(url: str) -> None:
    Database(url).close()
    assert sql(url, "SELECT version_num FROM alembic_version") == [(migrate.HEAD,)]
    # the developer's `alembic -x url=... check`, through pyproject.toml and env.py
    check = subprocess.run([sys.executable, "-m", "alembic", "-x", f"url={url}", "check"], cwd=REPO, capture_output=True,
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
    assert sql(url, "SELECT version_num FROM alembic_version") == [(migrate.HEAD,)]


def test_evaluations_stored_at_the_first_schema_are_tallied(url: str) -> None:
    """0002 tallies the evaluations already stored: the aggregates give the answers they gave before it, and later
    evaluations add to those tallies."""
    run_on(url, command.upgrade, migrate.FIRST)
    at = datetime(2024, 1, 1)
    insert_rows(url, "problems", [dict(name=name, level=level, path="p", sha256="h", created_at=at)
                                  for name, level in (("A", 1), ("B", 2))])  # fmt: skip
    insert_rows(url, "solutions", [dict(sha256=sha, problem_id=pid, source="s", origin="seed", created_at=at)
                                   for sha, pid in (("a1", 1), ("a2", 1), ("b1", 2))])  # fmt: skip
    insert_rows(url, "evaluations", [
        old_run(1, "correct", 2.0, minute=5),
        old_run(2, "correct", 2.0, minute=1),  # ties with a1's run, but ran earlier: the best
        old_run(1, "correct"),  # correct but untimed: counted, never the best
        old_run(1, "incorrect"),
        old_run(2, "correct", 5.0, device_name="cpu"),
        old_run(3, "compile_error"),
        old_run(3, "correct", 0.5),
    ])  # fmt: skip
    with Database(url) as db:
        a, b = db.leaderboard(device_name="H100")
        assert (a.best_sha256, a.best_speedup, a.evaluations_by_status) == ("a2", 2.0, {"correct": 3, "incorrect": 1})
        assert (b.best_sha256, b.best_speedup, b.evaluations_by_status) == ("b1", 0.5, {"compile_error": 1, "correct": 1})
        assert [(r.best_device_name, r.n_evaluations, r.n_solutions) for r in db.leaderboard()] == [
            ("cpu", 5, 2), ("H100", 2, 1)
        ]  # fmt: skip
        assert db.problem_fast_p(device_name="H100") == {0.0: 1.0, 1.0: 0.5, 1.5: 0.5, 2.0: 0.0}
        assert db.geomean_speedup(device_name="H100") == pytest.approx(1.0, rel=1e-12)
        db.add_evaluation("a1", status="correct", device="cuda", device_name="H100", speedup=3.0)
        a, _ = db.leaderboard(device_name="H100")
        assert (a.best_sha256, a.best_speedup, a.evaluations_by_status["correct"]) == ("a1", 3.0, 4)


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
    assert sql(url, "SELECT version_num FROM alembic_version") == [(migrate.HEAD,)]
    assert sql(url, "SELECT count(*) FROM problems") == [(1,)]


def test_generations_stored_before_runs_keep_their_rows(url: str) -> None:
    """0003 adds runs and the archive: calls stored before it belong to no run, were sample 0 of a draft prompt, and
    their solutions have no normalized hash; new calls can name a run."""
    run_on(url, command.upgrade, "0002")
    at = datetime(2024, 1, 1)
    insert_rows(url, "problems", [dict(name="relu", level=1, path="p", sha256="h", created_at=at)])
    insert_rows(url, "solutions", [dict(sha256="s1", problem_id=1, source="s", origin="generated", created_at=at)])
    insert_rows(url, "generations", [dict(problem_id=1, request_hash="r", provider="openai", model="m", prompt=[],
                                          response="x", prompt_tokens=3, completion_tokens=4, cost_usd=None, latency_s=0.0,
                                          turn=0, solution_id=1, extraction_status="ok", created_at=at)])  # fmt: skip
    with Database(url) as db:
        (old,) = db.generations("relu")
        assert (old.run_id, old.sample, old.island, old.prompt_kind, old.prompt_tokens) == (None, 0, None, "draft", 3)
        assert db.get_solution("s1").normalized_sha256 is None
        run_id = db.start_run({"problems": ["relu"]})
        db.add_generation(problem="relu", request_hash="r2", provider="openai", model="m", prompt=[], response="y",
                          prompt_tokens=5, completion_tokens=6, cost_usd=0.5, run_id=run_id, sample=1, island=0)
        assert [(s.run_id, s.calls, s.cost_usd, s.unpriced) for s in db.spend(by=("run_id",))] == [
            (None, 1, 0.0, 1), (run_id, 1, 0.5, 0)]
    assert sql(url, "SELECT version_num FROM alembic_version") == [(migrate.HEAD,)]


def test_a_call_stored_with_one_parent_keeps_it_as_its_first(url: str) -> None:
    """0004 adds every parent of a call: a call stored before it had one, parent_generation_id, and reads as that
    one parent; a new call stores several (a crossover's two)."""
    run_on(url, command.upgrade, "0003")
    at = datetime(2024, 1, 1)
    insert_rows(url, "problems", [dict(name="relu", level=1, path="p", sha256="h", created_at=at)])
    call = dict(problem_id=1, provider="openai", model="m", prompt=[], response="x", prompt_tokens=0, completion_tokens=0,
                cost_usd=None, latency_s=0.0, turn=0, sample=0, prompt_kind="draft", extraction_status="ok", created_at=at)
    insert_rows(url, "generations", [call | dict(request_hash="a"), call | dict(request_hash="b")])
    insert_rows(url, "generations", [call | dict(request_hash="c", turn=1, prompt_kind="refine", parent_generation_id=1)])
    with Database(url) as db:
        assert {g.request_hash: g.parent_generation_ids for g in db.generations("relu")} == {"a": [], "b": [], "c": [1]}
        both = db.add_generation(problem="relu", request_hash="d", provider="openai", model="m", prompt=[], response="y",
                                 prompt_kind="crossover", parent_generation_ids=[2, 1])
        crossover = db.get_generation(both)
        assert (crossover.parent_generation_id, crossover.parent_generation_ids) == (2, [2, 1])
    assert sql(url, "SELECT version_num FROM alembic_version") == [(migrate.HEAD,)]


def test_a_database_from_before_reuses_were_recorded_records_them(url: str) -> None:
    """0008 adds the reuses of stored answers: a call stored before it has none (none were recorded), a new reuse
    names it and its run, and the downgrade drops them with their table."""
    run_on(url, command.upgrade, "0007")
    at = datetime(2024, 1, 1)
    insert_rows(url, "problems", [dict(name="relu", level=1, path="p", sha256="h", created_at=at)])
    insert_rows(url, "runs", [dict(settings={}, status="finished", stop_reason="", wall_s=0.0, created_at=at,
                                   updated_at=at)])  # fmt: skip
    insert_rows(url, "generations", [dict(problem_id=1, request_hash="a", provider="openai", model="m", prompt=[],
                                          response="x", prompt_tokens=0, completion_tokens=0, cost_usd=None,
                                          latency_s=0.0, turn=0, sample=0, run_id=1, prompt_kind="draft",
                                          extraction_status="ok", created_at=at)])  # fmt: skip
    with Database(url) as db:
        assert db.reuses() == []
        run_id = db.start_run({})
        reuse = db.add_reuse(1, run_id=run_id)
        assert [(r.id, r.generation_id, r.run_id) for r in db.reuses()] == [(reuse, 1, run_id)]
    assert sql(url, "SELECT version_num FROM alembic_version") == [(migrate.HEAD,)]
    run_on(url, command.downgrade, "0007")
    assert sql(url, "SELECT count(*) FROM generations") == [(1,)]
    with pytest.raises(DBAPIError, match="generation_reuses"):
        sql(url, "SELECT count(*) FROM generation_reuses")


def test_the_declared_head_is_alembics_and_an_up_to_date_database_opens_without_alembic(tmp_path):
    """migrate.HEAD stands for the revision files' head, so opening a current database (every command's first
    step) reads one row and imports no alembic: a stored verdict comes back in well under a second."""
    from alembic.script import ScriptDirectory

    assert migrate.HEAD == ScriptDirectory.from_config(migrate.config()).get_current_head()
    url = f"sqlite:///{tmp_path / 'k.db'}"
    Database(url).close()  # created and migrated
    probe = f"import sys\nfrom db import Database\nDatabase({url!r}).close()\nprint(sorted(m for m in sys.modules if m.startswith('alembic')))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr
