"""Does the leaderboard stay fast at scale? Builds N evaluation rows in a new SQLite file as an older kforge left them
(schema revision 0001, in bulk), lets Database() migrate it, which tallies them, then times the aggregate queries and
one write.

Usage: python benchmarks/leaderboard_scale.py [N=1000000] [DB_PATH]   (prints one JSON object; target < 100 ms)
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

from alembic import command
from sqlalchemy import Connection, MetaData, Table, create_engine, insert

from db import Database, migrate

PROBLEMS, SOLUTIONS_PER_PROBLEM, BATCH, WRITES = 50, 200, 50_000, 100
STATUSES = ["correct", "incorrect", "compile_error", "runtime_error", "timeout", "leak"]
T0 = datetime(2025, 1, 1)


def fill_first_schema(url: str, n: int) -> None:
    """Revision 0001's tables, filled in bulk through reflection (db.models describes only the newest schema)."""
    engine = create_engine(url)
    with engine.begin() as conn:
        command.upgrade(migrate.config(conn), migrate.FIRST)
        tables = MetaData()
        tables.reflect(conn)
        problems = [dict(name=f"p{p:03d}", level=1 + p % 3, path=f"/problems/p{p:03d}.py", sha256=f"{p:064x}",
                         created_at=T0) for p in range(PROBLEMS)]  # fmt: skip
        pids = _insert(conn, tables.tables["problems"], problems)
        solutions = [dict(sha256=f"{p:032x}{s:032x}", problem_id=pid, source="source", origin="submitted",
                          created_at=T0)
                     for p, pid in enumerate(pids) for s in range(SOLUTIONS_PER_PROBLEM)]  # fmt: skip
        sids = _insert(conn, tables.tables["solutions"], solutions)
        rng, evaluations = random.Random(0), tables.tables["evaluations"]
        for start in range(0, n, BATCH):
            conn.execute(insert(evaluations), [_evaluation(rng, sids, i) for i in range(start, min(start + BATCH, n))])
    engine.dispose()


def _insert(conn: Connection, table: Table, rows: list[dict]) -> list[int]:
    return list(conn.scalars(insert(table).returning(table.c.id, sort_by_parameter_order=True), rows))


def _evaluation(rng: random.Random, sids: list[int], i: int) -> dict:
    status = rng.choice(STATUSES)
    return dict(solution_id=rng.choice(sids), status=status, cause="", evidence={}, device="cuda", device_name="H100",
                size="full", speedup=rng.lognormvariate(0, 0.7) if status == "correct" else None, torch_version="",
                timings={}, wall_s=0.0, created_at=T0 + timedelta(seconds=i))  # fmt: skip


def best_of(fn: Callable[[], object], repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return min(times)


def mean_write_ms(database: Database) -> float:
    """add_evaluation also updates the evaluation's tally: what that costs per write."""
    times = []
    for _ in range(WRITES):
        start = time.perf_counter()
        database.add_evaluation(f"{7:032x}{0:032x}", status="correct", device="cuda", device_name="H100", speedup=1.0)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.mean(times)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    path = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.mkdtemp()) / "scale.db"
    url = f"sqlite:///{path}"
    start = time.perf_counter()
    fill_first_schema(url, n)
    fill_s = time.perf_counter() - start
    start = time.perf_counter()
    database = Database(url)  # upgrades to head
    report = {"rows": n, "fill_s": fill_s, "migrate_s": time.perf_counter() - start,
              "leaderboard_ms": best_of(database.leaderboard),
              "leaderboard_one_problem_ms": best_of(lambda: database.leaderboard("p007")),
              "leaderboard_device_size_ms": best_of(lambda: database.leaderboard(device_name="H100", size="full")),
              "fast_p_ms": best_of(database.problem_fast_p), "boards_ms": best_of(database.boards), "geomean_ms": best_of(database.geomean_speedup)}  # fmt: skip
    assert sum(row.n_evaluations for row in database.leaderboard()) == n, "the tallies lost evaluations"
    report["add_evaluation_ms"] = mean_write_ms(database)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
