"""A board's best is judged by each solution's latest verdict there: a solution stored `correct 1.04` and later
`incorrect` (a rerun, a problem found to compute something else) is never the best, and fast_p counts it as what it
now is. Against a real SQLite file, read back through `kforge leaderboard --json` as a user reads it."""

from __future__ import annotations

import json

from sqlalchemy import create_engine, text

from conftest import ROOT, kforge_runner
from db import Database


def _board(kforge) -> tuple[dict, dict]:
    """(the relu row on the cpu small board, the leaderboard's summary)."""
    shown = json.loads(kforge("leaderboard", "--json").stdout)
    (row,) = [r for r in shown["problems"] if r["device_name"] == "cpu"]
    return row, shown


def _verdict(db: Database, sha: str, status: str, speedup: float | None = None) -> int:
    return db.add_evaluation(sha, status=status, device="cpu", device_name="cpu", size="small", speedup=speedup)


def test_a_solution_whose_latest_verdict_is_not_correct_is_never_the_best(tmp_path):
    kforge = kforge_runner(tmp_path, tmp_path / "builds")
    with Database(kforge.db_url) as db:
        db.upsert_problem("relu", 1, str(ROOT / "reference_problems" / "relu.py"), "sha-relu")
        db.upsert_solution("honest", "relu", "1")
        db.upsert_solution("slow", "relu", "2")
        _verdict(db, "honest", "correct", 1.04)
        _verdict(db, "slow", "correct", 0.8)
        before, _ = _board(kforge)
        _verdict(db, "honest", "incorrect")
        after, summary = _board(kforge)
        _verdict(db, "slow", "incorrect")  # the board's best is gone too: no best at all
        none_left, _ = _board(kforge)
        _verdict(db, "honest", "correct", 1.1)  # a rerun judged it correct again: the best once more
        again, _ = _board(kforge)
    assert (before["best_sha256"], before["best_speedup"]) == ("honest", 1.04), before
    assert (after["best_sha256"], after["best_speedup"]) == ("slow", 0.8), after
    assert after["solutions_by_status"] == {"correct": 1, "incorrect": 1}, after
    assert (summary["samples"], summary["fast_p"]["0.0"], summary["fast_p"]["1.0"]) == (2, 0.5, 0.0), summary
    assert summary["boards"][0]["problem_fast_p"]["1.0"] == 0.0, summary
    assert none_left["best_sha256"] is None and none_left["solutions_by_status"] == {"incorrect": 2}, none_left
    assert (again["best_sha256"], again["best_speedup"]) == ("honest", 1.1), again


def test_bests_stored_before_are_chosen_again_by_latest_verdicts(sqlite_url):
    """A database whose tally kept the superseded `correct 1.04` as its best (as kforge chose bests before) is
    brought to head with the best chosen again."""
    with Database(sqlite_url) as db:
        db.upsert_problem("relu", 1, "relu.py", "sha-relu")
        db.upsert_solution("honest", "relu", "1")
        db.upsert_solution("slow", "relu", "2")
        honest = _verdict(db, "honest", "correct", 1.04)
        _verdict(db, "slow", "correct", 0.8)
        _verdict(db, "honest", "incorrect")
    engine = create_engine(sqlite_url)
    with engine.begin() as conn:  # the older revision, and the best it would have kept
        conn.execute(text("UPDATE evaluation_tallies SET best_id = :id WHERE status = 'correct'"), {"id": honest})
        for later in ("generation_reuses", "job_clients", "jobs"):  # what revisions after it made
            conn.execute(text(f"DROP TABLE {later}"))
        conn.execute(text("UPDATE alembic_version SET version_num = '0005'"))
    engine.dispose()
    with Database(sqlite_url) as db:
        (row,) = db.leaderboard()
    assert (row.best_sha256, row.best_speedup) == ("slow", 0.8), row
