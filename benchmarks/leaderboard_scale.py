"""Does the leaderboard stay fast at scale? Fills a SQLite file with N evaluation rows, then times the queries.

Usage: python benchmarks/leaderboard_scale.py [N=1000000] [DB_PATH]   (prints one JSON object; target < 100 ms)
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import insert

from db import Database
from db.models import Evaluation

PROBLEMS, SOLUTIONS_PER_PROBLEM, BATCH = 50, 200, 50_000
STATUSES = ["correct", "incorrect", "compile_error", "runtime_error", "timeout", "leak"]


def fill(database: Database, n: int) -> list[int]:
    """Problems and solutions through the public API; evaluation rows in bulk (the API inserts one at a time)."""
    ids = []
    for p in range(PROBLEMS):
        database.upsert_problem(f"p{p:03d}", 1 + p % 3, f"/problems/p{p:03d}.py", f"{p:064x}")
        ids += [database.upsert_solution(f"{p:032x}{s:032x}", f"p{p:03d}", "source") for s in range(SOLUTIONS_PER_PROBLEM)]
    rng = random.Random(0)
    with database.session(write=True) as s, s.begin():
        for start in range(0, n, BATCH):
            rows = []
            for _ in range(min(BATCH, n - start)):
                status = rng.choice(STATUSES)
                speedup = rng.lognormvariate(0, 0.7) if status == "correct" else None
                rows.append({"solution_id": rng.choice(ids), "status": status, "device": "cuda", "device_name": "H100",
                             "size": "full", "speedup": speedup, "evidence": {}, "timings": {}})
            s.execute(insert(Evaluation), rows)
    return ids


def best_of(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return min(times)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    path = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.mkdtemp()) / "scale.db"
    database = Database(f"sqlite:///{path}")
    start = time.perf_counter()
    fill(database, n)
    report = {"rows": n, "fill_s": time.perf_counter() - start,
              "leaderboard_ms": best_of(database.leaderboard),
              "leaderboard_one_problem_ms": best_of(lambda: database.leaderboard("p007")),
              "fast_p_ms": best_of(database.fast_p), "geomean_ms": best_of(database.geomean_speedup)}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
