"""Tests of the db package against real SQLite files and, given a server, PostgreSQL (no mocks: WAL, locks, JSON
and concurrent writers are the point; the `url` fixture is in conftest.py)."""

from __future__ import annotations

import itertools
import math
import multiprocessing
import random
import subprocess
import sys
import textwrap
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from db import ConflictError, Database, DatabaseError, NotFoundError, default_url
from db.models import Problem

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def db(url: str):
    with Database(url) as database:
        yield database


def add_problem(db: Database, name: str, level: int = 1) -> int:
    return db.upsert_problem(name, level, f"reference_problems/{name}.py", f"sha-{name}")


def add_eval(db: Database, sha: str, status: str = "correct", speedup: float | None = None, **kw) -> int:
    return db.add_evaluation(sha, status=status, device="cuda", device_name=kw.pop("device_name", "H100"),
                             speedup=speedup, **kw)  # fmt: skip


# -- problems and solutions ---------------------------------------------------------------------


def test_upsert_problem_keeps_one_row_and_refreshes_it(db: Database) -> None:
    pid = db.upsert_problem("relu", 1, "a/relu.py", "h1")
    assert db.upsert_problem("relu", 2, "b/relu.py", "h2") == pid
    assert add_problem(db, "gelu") != pid
    with db.session() as s:
        row = s.get(Problem, pid)
        assert (row.level, row.path, row.sha256) == (2, "b/relu.py", "h2")


def test_solution_round_trip_and_dedup(db: Database) -> None:
    add_problem(db, "relu")
    sid = db.upsert_solution("abc", "relu", "print(1)", origin="generated", model="gpt-x", seed_id="seed-3")
    assert db.upsert_solution("abc", "relu", "print(1)", path="solutions/relu/abc.py") == sid
    row = db.get_solution("abc")
    assert row is not None
    assert (row.id, row.problem, row.source, row.origin, row.model, row.seed_id) == (
        sid, "relu", "print(1)", "generated", "gpt-x", "seed-3"
    )  # fmt: skip
    assert row.path == "solutions/relu/abc.py"  # a blank filled by the second sighting
    assert row.created_at.tzinfo is not None
    assert db.get_solution("nope") is None


def test_upsert_solution_never_overwrites(db: Database) -> None:
    add_problem(db, "relu")
    db.upsert_solution("abc", "relu", "x", path="first.py", model="m1")
    db.upsert_solution("abc", "relu", "x", path="second.py", model="m2")
    row = db.get_solution("abc")
    assert (row.path, row.model) == ("first.py", "m1")


def test_upsert_solution_rejects_bad_input(db: Database) -> None:
    add_problem(db, "relu")
    add_problem(db, "gelu")
    db.upsert_solution("abc", "relu", "x")
    with pytest.raises(NotFoundError, match="unknown problem 'nope'"):
        db.upsert_solution("new", "nope", "x")
    with pytest.raises(ConflictError, match="already stored for problem 'relu'"):
        db.upsert_solution("abc", "gelu", "x")
    with pytest.raises(ValueError, match="origin must be one of"):
        db.upsert_solution("new", "relu", "x", origin="llm")
    with pytest.raises(ConflictError, match="own parent"):
        db.upsert_solution("abc", "relu", "x", parent_sha256="abc")


def test_failed_write_leaves_nothing(db: Database) -> None:
    add_problem(db, "relu")
    with pytest.raises(NotFoundError, match="unknown solution 'ghost'"):
        db.upsert_solution("child", "relu", "x", parent_sha256="ghost")
    assert db.get_solution("child") is None
    with pytest.raises(TypeError, match="missing required fields: device"):
        db.add_evaluation("child", status="correct")
    with pytest.raises(TypeError, match="unknown fields: speed"):
        db.add_evaluation("child", status="correct", device="cpu", speed=2.0)


def test_lineage_walks_up_to_the_root(db: Database) -> None:
    add_problem(db, "relu")
    db.upsert_solution("root", "relu", "a", origin="seed")
    db.upsert_solution("kid", "relu", "b", origin="repair", parent_sha256="root")
    db.upsert_solution("grandkid", "relu", "c", origin="repair")
    db.upsert_solution("grandkid", "relu", "c", parent_sha256="kid")  # parent filled in later
    chain = db.solution_lineage("grandkid")
    assert [r.sha256 for r in chain] == ["grandkid", "kid", "root"]
    assert [r.parent_sha256 for r in chain] == ["kid", "root", None]
    assert db.solution_lineage("root")[0].parent_sha256 is None
    assert db.solution_lineage("unknown") == []


def test_problems_and_solutions_listings(db: Database) -> None:
    add_problem(db, "relu", level=2)
    add_problem(db, "gelu", level=1)
    db.upsert_solution("kid", "relu", "b", model="m")
    db.upsert_solution("root", "gelu", "a")
    assert [(p.name, p.level, p.path) for p in db.problems()] == [
        ("gelu", 1, "reference_problems/gelu.py"), ("relu", 2, "reference_problems/relu.py")
    ]  # fmt: skip
    assert [s.sha256 for s in db.solutions()] == ["kid", "root"]
    assert [(s.sha256, s.model) for s in db.solutions(problem="relu")] == [("kid", "m")]
    assert db.solutions(problem="nope") == []


# -- evaluations --------------------------------------------------------------------------------


def test_evaluation_round_trip(db: Database) -> None:
    add_problem(db, "relu")
    db.upsert_solution("abc", "relu", "x", path="s.py", model="m")
    evidence = {"cause": "ok", "mismatch": None, "notes": ["a", "b"], "leaked_bytes": {"cuda": 0}}
    timings = {"candidate": {"median_ms": 1.5, "reps": 100}, "reference": {"median_ms": 3.0, "reps": 50}}
    eid = db.add_evaluation(
        "abc", status="correct", cause="ok", evidence=evidence, device="cuda", device_name="NVIDIA H100",
        size="small", candidate_ms=1.5, candidate_std_ms=0.1, reference_ms=3.0, compiled_reference_ms=2.0,
        speedup=2.0, speedup_vs_compile=4 / 3, torch_version="2.5.1", cuda_version="12.4", timings=timings,
        wall_s=12.5,
    )  # fmt: skip
    row = db.find_evaluation("abc", "NVIDIA H100", "small")
    assert row is not None and row.id == eid
    assert (row.solution_sha256, row.solution_path, row.problem, row.model) == ("abc", "s.py", "relu", "m")
    assert row.evidence == evidence and row.timings == timings
    assert (row.speedup, row.speedup_vs_compile, row.compiled_reference_ms) == (2.0, 4 / 3, 2.0)
    assert (row.torch_version, row.cuda_version, row.wall_s) == ("2.5.1", "12.4", 12.5)
    assert db.find_evaluation("abc", "NVIDIA H100", "full") is None
    assert db.find_evaluation("abc", "cpu", "small") is None
    with pytest.raises(NotFoundError):
        add_eval(db, "ghost")


def test_find_evaluation_returns_latest(db: Database) -> None:
    add_problem(db, "relu")
    db.upsert_solution("abc", "relu", "x")
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    add_eval(db, "abc", "incorrect", created_at=t0 + timedelta(hours=2))
    add_eval(db, "abc", "timeout", created_at=t0)
    assert db.find_evaluation("abc", "H100", "full").status == "incorrect"
    last = add_eval(db, "abc", "correct", 1.1)
    assert db.find_evaluation("abc", "H100", "full").id == last


def test_evaluations_newest_first_and_filtered(db: Database) -> None:
    for name in ("relu", "gelu"):
        add_problem(db, name)
        db.upsert_solution(f"s-{name}", name, name)
    ids = [add_eval(db, "s-relu", "incorrect"), add_eval(db, "s-gelu"), add_eval(db, "s-relu", speedup=1.0)]
    assert [e.id for e in db.evaluations()] == ids[::-1]
    assert [e.id for e in db.evaluations(problem="relu")] == [ids[2], ids[0]]
    assert [e.id for e in db.evaluations(limit=1)] == [ids[2]]
    assert db.evaluations(problem="nope") == []


def build_board(db: Database) -> None:
    """A: best 3.0 of several; B: 1.2; C: never correct; D: solutions, no evaluations;
    E: correct but untimed (speedup None) so it counts as evaluated, never as fast."""
    for name, level in (("A", 1), ("B", 1), ("C", 2), ("D", 2), ("E", 3)):
        add_problem(db, name, level)
    db.upsert_solution("a1", "A", "1", model="m1")
    db.upsert_solution("a2", "A", "2", path="sol/a2.py", model="m2")
    add_eval(db, "a1", speedup=0.5)
    add_eval(db, "a2", speedup=2.5)
    add_eval(db, "a2", speedup=3.0, candidate_ms=1.0, reference_ms=3.0, speedup_vs_compile=1.5)
    add_eval(db, "a1", "incorrect")
    add_eval(db, "a1", speedup=9.0, device_name="cpu")  # only counts when not filtering by device
    db.upsert_solution("b1", "B", "1")
    add_eval(db, "b1", "compile_error")
    add_eval(db, "b1", speedup=1.2)
    db.upsert_solution("c1", "C", "1")
    add_eval(db, "c1", "incorrect")
    add_eval(db, "c1", "runtime_error")
    db.upsert_solution("d1", "D", "1")
    db.upsert_solution("e1", "E", "1")
    add_eval(db, "e1", speedup=None)


def test_leaderboard_best_speedup_and_counts(db: Database) -> None:
    build_board(db)
    board = {r.problem: r for r in db.leaderboard(device_name="H100")}
    assert list(board) == ["A", "B", "C", "D", "E"]  # level, then name
    a = board["A"]
    assert (a.best_speedup, a.best_sha256, a.best_path, a.best_model) == (3.0, "a2", "sol/a2.py", "m2")
    assert (a.candidate_ms, a.reference_ms, a.speedup_vs_compile, a.best_device_name) == (1.0, 3.0, 1.5, "H100")
    assert a.evaluations_by_status == {"correct": 3, "incorrect": 1}
    assert (a.n_solutions, a.n_evaluations) == (2, 4)
    assert (board["B"].best_speedup, board["B"].evaluations_by_status) == (1.2, {"correct": 1, "compile_error": 1})
    assert board["C"].best_speedup is None and board["C"].evaluations_by_status == {"incorrect": 1, "runtime_error": 1}
    assert (board["D"].n_solutions, board["D"].n_evaluations, board["D"].evaluations_by_status) == (1, 0, {})
    assert board["E"].best_speedup is None and board["E"].evaluations_by_status == {"correct": 1}
    unfiltered = db.leaderboard(problem="A")
    assert [(r.problem, r.best_speedup, r.best_device_name, r.n_evaluations) for r in unfiltered] == [
        ("A", 9.0, "cpu", 5)
    ]
    assert db.leaderboard(problem="nope") == []


def test_leaderboard_tie_goes_to_the_earliest(db: Database) -> None:
    add_problem(db, "A")
    db.upsert_solution("first", "A", "1")
    db.upsert_solution("second", "A", "2")
    db.upsert_solution("imported", "A", "3")
    add_eval(db, "first", speedup=2.0)
    add_eval(db, "second", speedup=2.0)
    assert db.leaderboard()[0].best_sha256 == "first"
    add_eval(db, "imported", speedup=2.0, created_at=datetime(2020, 1, 1, tzinfo=UTC))  # stored last, run first
    assert db.leaderboard()[0].best_sha256 == "imported"


def board_of(r) -> tuple:
    return r.solution_sha256, r.device_name, r.size, r.precision


def test_aggregates_match_every_evaluation(db: Database) -> None:
    """The tallies add_evaluation keeps answer as aggregating every stored evaluation would (the best among each
    solution's latest verdict per board): random runs over problems, devices, sizes and statuses, with speedup ties,
    zero speedups, reruns and created_at out of order (imports)."""
    rng, t0 = random.Random(1), datetime(2024, 1, 1, tzinfo=UTC)
    for name in "ABC":
        add_problem(db, name)
        for i in range(3):
            db.upsert_solution(f"{name}{i}", name, f"{name}{i}")
    for _ in range(150):
        add_eval(db, f"{rng.choice('ABC')}{rng.randrange(3)}", rng.choice(["correct", "correct", "incorrect", "leak"]),
                 rng.choice([None, 0.0, 0.5, 1.0, 2.0, 3.0]), device_name=rng.choice(["H100", "cpu"]),
                 size=rng.choice(["full", "small"]), created_at=t0 + timedelta(minutes=rng.randrange(60)))  # fmt: skip
    runs = db.evaluations()
    latest = {}  # each solution's latest verdict per board: the only ones that can be a board's best
    for r in sorted(runs, key=lambda r: r.id):
        latest[board_of(r)] = r.id
    for device_name, size in itertools.product((None, "H100"), (None, "small")):
        picked = [r for r in runs if device_name in (None, r.device_name) and size in (None, r.size)]
        board = db.leaderboard(device_name=device_name, size=size)
        for row in board:
            mine = [r for r in picked if r.problem == row.problem]
            assert row.evaluations_by_status == Counter(r.status for r in mine)
            timed = [r for r in mine if r.status == "correct" and (r.speedup or 0) > 0 and r.id == latest[board_of(r)]]
            best = min(timed, key=lambda r: (-r.speedup, r.created_at, r.id), default=None)
            assert (row.best_speedup, row.best_sha256) == (best and best.speedup, best and best.solution_sha256)
        bests = [row.best_speedup for row in board if row.best_speedup]
        n = len({r.problem for r in picked})
        fast = {p: sum(b > p for b in bests) / n for p in (0.0, 1.0, 2.0)}
        assert db.problem_fast_p((0, 1, 2), device_name=device_name, size=size) == fast
        geomean = math.prod(bests) ** (1 / len(bests))
        assert db.geomean_speedup(device_name=device_name, size=size) == pytest.approx(geomean, rel=1e-12)


def test_fast_p_and_geomean(db: Database) -> None:
    build_board(db)
    # evaluated on H100: A, B, C, E (D has none); best correct speedups: A 3.0, B 1.2
    fast = db.problem_fast_p(thresholds=(0, 1, 1.2, 1.5, 2, 3), device_name="H100")
    assert fast == {0.0: 0.5, 1.0: 0.5, 1.2: 0.25, 1.5: 0.25, 2.0: 0.25, 3.0: 0.0}
    assert db.problem_fast_p(device_name="H100") == {0.0: 0.5, 1.0: 0.5, 1.5: 0.25, 2.0: 0.25}
    assert db.geomean_speedup(device_name="H100") == pytest.approx(math.sqrt(3.0 * 1.2), rel=1e-12)
    # unfiltered, A's best is the cpu run at 9.0
    assert db.geomean_speedup() == pytest.approx(math.sqrt(9.0 * 1.2), rel=1e-12)
    assert db.problem_fast_p(problem="B") == {0.0: 1.0, 1.0: 1.0, 1.5: 0.0, 2.0: 0.0}
    assert db.problem_fast_p(problem="C") == {0.0: 0.0, 1.0: 0.0, 1.5: 0.0, 2.0: 0.0}
    assert db.geomean_speedup(problem="C") is None
    assert db.problem_fast_p(problem="D") == {}
    assert db.problem_fast_p(size="small") == {}


def test_empty_database_aggregates(db: Database) -> None:
    assert db.leaderboard() == [] and db.evaluations() == []
    assert db.problem_fast_p() == {} and db.geomean_speedup() is None


# -- generations --------------------------------------------------------------------------------


def gen_fields(**kw) -> dict:
    base = dict(problem="relu", request_hash="h1", provider="openai", model="gpt-x",
                prompt=[{"role": "system", "content": "be fast"}, {"role": "user", "content": "relu"}],
                response="```python\nclass ModelNew: ...\n```", prompt_tokens=100, completion_tokens=50,
                cost_usd=0.0125, latency_s=3.5)  # fmt: skip
    return base | kw


def test_generation_cache_round_trip(db: Database) -> None:
    add_problem(db, "relu")
    assert db.find_generation("h1") is None
    gid = db.add_generation(**gen_fields())
    hit = db.find_generation("h1")
    assert hit is not None and hit.id == gid
    assert hit.prompt == gen_fields()["prompt"] and hit.response.startswith("```python")
    assert (hit.prompt_tokens, hit.completion_tokens, hit.cost_usd, hit.latency_s) == (100, 50, 0.0125, 3.5)
    assert (hit.turn, hit.extraction_status, hit.solution_sha256, hit.problem) == (0, "ok", None, "relu")
    db.upsert_solution("cand", "relu", "class ModelNew: ...", origin="generated", model="gpt-x")
    db.set_generation_solution(gid, "cand")
    assert db.find_generation("h1").solution_sha256 == "cand"
    child = db.add_generation(**gen_fields(request_hash="h2", turn=1, parent_generation_id=gid,
                                           extraction_status="no_code", cost_usd=None))  # fmt: skip
    assert db.find_generation("h2").parent_generation_id == gid
    assert [g.id for g in db.generations()] == [child, gid]
    assert [g.id for g in db.generations(problem="relu", limit=1)] == [child]
    assert db.generations(problem="other") == []


def test_generation_errors(db: Database) -> None:
    add_problem(db, "relu")
    with pytest.raises(NotFoundError, match="unknown problem"):
        db.add_generation(**gen_fields(problem="nope"))
    with pytest.raises(NotFoundError, match="unknown generation id 99"):
        db.set_generation_solution(99, "x")
    with pytest.raises(TypeError, match="missing required fields: response"):
        db.add_generation(**{k: v for k, v in gen_fields().items() if k != "response"})
    assert db.generations() == []


def test_find_generation_prefers_latest(db: Database) -> None:
    add_problem(db, "relu")
    db.add_generation(**gen_fields(response="old"))
    db.add_generation(**gen_fields(response="new"))
    assert db.find_generation("h1").response == "new"


def test_a_reuse_is_recorded_once_per_run_and_listed_oldest_first(db: Database) -> None:
    add_problem(db, "relu")
    gid = db.add_generation(**gen_fields())
    first, second = db.start_run({}), db.start_run({})
    once = db.add_reuse(gid, run_id=first)
    assert db.add_reuse(gid, run_id=first) == once  # the run resumed takes the same answer again: one reuse
    other = db.add_reuse(gid, run_id=second)
    loose = [db.add_reuse(gid), db.add_reuse(gid)]  # no run to tell them apart: each is its own
    assert [(r.id, r.generation_id, r.run_id) for r in db.reuses()] == [
        (once, gid, first), (other, gid, second), (loose[0], gid, None), (loose[1], gid, None)]
    assert [r.id for r in db.reuses(run_id=second)] == [other]
    with pytest.raises(NotFoundError, match="unknown generation id 99"):
        db.add_reuse(99, run_id=first)


# -- opening ------------------------------------------------------------------------------------


def test_reopen_keeps_data(url: str) -> None:
    with Database(url) as first:
        add_problem(first, "relu")
        first.upsert_solution("abc", "relu", "x")
        add_eval(first, "abc", speedup=2.0)
    with Database(url) as second:
        assert second.leaderboard()[0].best_speedup == 2.0
        assert second.get_solution("abc").source == "x"


def test_sqlite_uses_wal_and_busy_timeout(sqlite_url: str) -> None:
    with Database(sqlite_url) as db, db.session() as s:
        assert s.connection().exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert s.connection().exec_driver_sql("PRAGMA busy_timeout").scalar() >= 10_000
        assert s.connection().exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


@pytest.mark.parametrize(
    ("bad_url", "message"),
    [
        ("sqlite:////nonexistent/dir/x.db",
         "cannot open database 'sqlite:////nonexistent/dir/x.db': unable to open database file"),
        ("not a url", "invalid database URL 'not a url': cannot parse it"),
        ("", "invalid database URL '': cannot parse it"),
        ("foo://", "invalid database URL 'foo://': unknown dialect 'foo'"),
        ("nosuchdb://x", "invalid database URL 'nosuchdb://x': unknown dialect 'nosuchdb'"),
    ],
)  # fmt: skip
def test_bad_urls_give_one_line_errors(bad_url: str, message: str) -> None:
    with pytest.raises(DatabaseError) as info:
        Database(bad_url)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_not_a_database_file(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_text("this is not sqlite " * 100)
    with pytest.raises(DatabaseError, match=r"^cannot open database '.*junk.db': file is not a database$"):
        Database(f"sqlite:///{junk}")


def test_user_url_directory_is_not_created(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError, match="unable to open database file"):
        Database(f"sqlite:///{tmp_path / 'missing' / 'x.db'}")
    assert not (tmp_path / "missing").exists()


def test_default_url_and_default_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """db knows no environment: $KFORGE_DB is the app's business (kforge.settings), not the default's."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KFORGE_DB", f"sqlite:///{tmp_path / 'ignored.db'}")
    assert default_url() == f"sqlite:///{tmp_path}/.kforge/kforge.db"
    with Database.default() as database:
        add_problem(database, "relu")
    assert (tmp_path / ".kforge" / "kforge.db").is_file() and not (tmp_path / "ignored.db").exists()


# -- several processes --------------------------------------------------------------------------


def _writer(url: str, worker: int, n: int) -> None:
    with Database(url) as database:
        for i in range(n):
            database.upsert_problem("shared", 1, "p.py", "h")  # every worker races on the same rows
            database.upsert_solution("common", "shared", "x")
            sha = f"w{worker}-{i}"
            database.upsert_solution(sha, "shared", sha, parent_sha256="common")
            database.add_evaluation(sha, status="correct", device="cpu", device_name="cpu", speedup=1.0 + i)


def test_concurrent_writers(url: str) -> None:
    Database(url).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(url, w, 10)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    with Database(url) as database:
        (row,) = database.leaderboard()
        assert (row.n_solutions, row.n_evaluations, row.best_speedup) == (4 * 10 + 1, 4 * 10, 10.0)


def test_killed_writer_leaves_no_partial_rows(url: str) -> None:
    """A process killed mid-transaction must leave neither rows nor a stuck lock."""
    child = textwrap.dedent(f"""
        import sys, time
        from db import Database
        from db.models import Problem
        database = Database({url!r})
        with database.session(write=True) as s, s.begin():
            s.add(Problem(name="half", level=1, path="p", sha256="h"))
            s.flush()
            print("flushed", flush=True)
            time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", child], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "flushed"
    finally:
        proc.kill()
        proc.wait()
    with Database(url) as database:
        add_problem(database, "whole")  # the dead writer's lock is gone
        with database.session() as s:
            assert s.scalars(select(Problem.name)).all() == ["whole"]
