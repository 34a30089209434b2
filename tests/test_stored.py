"""`kforge delete`, `prune` and `leaderboard` over a stored SQLite file, run as users run them (`python -m kforge`):
what goes, what stays consistent, what each count counts."""

from __future__ import annotations

import csv
import hashlib
import io
import json

import pytest

from conftest import kforge_runner
from db import Database

H100, EPYC = "NVIDIA H100 80GB HBM3", "AMD EPYC"
PROSE = b"Here is the kernel you asked for. It's fast, and it's correct.\n"
PROSE_SHA = hashlib.sha256(PROSE).hexdigest()
NEVER, FAST, CHILD, BROKEN, GOOD = "ab" * 32, "f0" * 32, "c0" * 32, "a0" * 32, "d0" * 32


def _fill(db: Database, tmp_path) -> None:
    """relu: prose judged by nothing (kforge's failure, then skipped), code never judged, a fast kernel (rerun, on two
    boards, an archive elite written by an LLM call) and a child built on it; conv1d: a kernel that failed to compile
    three times, and a correct one."""
    db.upsert_problem("relu", 1, str(tmp_path / "relu.py"), "r")
    db.upsert_problem("conv1d", 2, str(tmp_path / "conv1d.py"), "c")
    for sha, problem, path, parent in [(PROSE_SHA, "relu", "answer.py", None), (NEVER, "relu", None, None),
                                       (FAST, "relu", "solutions/relu/fast.py", None), (CHILD, "relu", None, FAST),
                                       (BROKEN, "conv1d", None, None), (GOOD, "conv1d", None, None)]:
        db.upsert_solution(sha, problem, "source", path=path, parent_sha256=parent)

    def judged(sha, status, speedup=None, device_name=H100, size="full"):
        db.add_evaluation(sha, status=status, device="cuda", device_name=device_name, size=size, speedup=speedup)

    judged(PROSE_SHA, "reference_error", device_name=EPYC, size="small")
    judged(PROSE_SHA, "skipped", device_name=EPYC, size="small")
    judged(FAST, "correct", 2.0)
    judged(FAST, "correct", 3.0)
    judged(FAST, "correct", 2.85, EPYC, "small")
    judged(CHILD, "correct", 1.5)
    for _ in range(3):
        judged(BROKEN, "compile_error")
    judged(GOOD, "correct", 1.2)
    db.place_elite("relu", H100, "full", 0, "plain", FAST, 3.0)
    db.add_generation(problem="relu", solution_sha256=FAST, request_hash="h", provider="fake", model="coder",
                      prompt=[], response="```python\n...```", cost_usd=0.25)


@pytest.fixture
def stored(tmp_path, build_root):
    kforge = kforge_runner(tmp_path, build_root)
    with Database(kforge.db_url) as db:
        _fill(db, tmp_path)
    return kforge


def _state(url: str) -> tuple:
    with Database(url) as db:
        return ([s.sha256 for s in db.solutions()], [(e.id, e.status) for e in db.evaluations()],
                db.archive("relu", H100, "full"), db.generations(), db.boards())


def test_delete_removes_one_solution_and_keeps_the_rest_consistent(stored):
    said = stored("delete", "f0f0").stdout
    assert said == (f"deleted {FAST[:12]} (relu fast.py) with 3 evaluations and 1 archive cell; "
                    "kept, no longer linked: 1 LLM call, 1 solution built on it\n")
    with Database(stored.db_url) as db:
        assert db.get_solution(FAST) is None and db.archive("relu", H100, "full") == []
        (call,) = db.generations()
        assert call.solution_sha256 is None and call.cost_usd == 0.25  # the call and its spend stay
        assert db.get_solution(CHILD).parent_sha256 is None
        (relu,) = db.leaderboard("relu", device_name=H100, size="full")
        assert (relu.best_sha256, relu.best_speedup, relu.evaluations_by_status) == (CHILD, 1.5, {"correct": 1})
        assert [(r.problem, r.device_name) for r in db.boards()] == [("relu", H100), ("relu", EPYC), ("conv1d", H100)]
        epyc = db.leaderboard("relu", device_name=EPYC, size="small")[0]
        assert (epyc.best_sha256, epyc.evaluations_by_status) == (None, {"reference_error": 1, "skipped": 1})


def test_delete_by_file_takes_the_files_solution(stored, tmp_path):
    prose = tmp_path / "answer.py"
    prose.write_bytes(PROSE)
    assert stored("delete", str(prose)).stdout == f"deleted {PROSE_SHA[:12]} (relu answer.py) with 2 evaluations\n"
    with Database(stored.db_url) as db:
        assert db.get_solution(PROSE_SHA) is None and len(db.solutions()) == 5


def test_an_unknown_or_ambiguous_name_is_one_line_and_touches_nothing(stored):
    before = _state(stored.db_url)
    for args, said in [(["delete", "a"], f"kforge: error: 'a' matches 2 solutions: {NEVER[:12]} (relu), {BROKEN[:12]} "
                                         "(conv1d); give a longer prefix"),
                       (["delete", "e9"], "kforge: error: no stored solution starts with 'e9'"),
                       (["delete", ""], "kforge: error: '' is neither a file nor a sha256 prefix (hex digits)"),
                       (["prune", "--status", "broken"], "kforge: error: --status: no status broken (one of truncated, "),
                       (["prune", "-p", "nope"], "kforge: error: no stored problem 'nope'")]:
        err = stored(*args, expect=2).stderr
        assert err.startswith(said) and len(err.splitlines()) == 1, err
    assert _state(stored.db_url) == before


def test_prune_dry_run_lists_what_would_go_then_prune_removes_only_that(stored):
    before = _state(stored.db_url)
    listed = stored("prune", "--dry-run").stdout.splitlines()
    assert listed == [f"{PROSE_SHA[:12]}  relu  answer.py  reference_error 1, skipped 1", f"{NEVER[:12]}  relu  -  no verdict",
                      "would prune 2 solutions with 2 evaluations (--dry-run: nothing deleted)"]
    assert _state(stored.db_url) == before
    assert stored("prune").stdout == "pruned 2 solutions with 2 evaluations\n"
    with Database(stored.db_url) as db:
        assert [s.sha256 for s in db.solutions()] == [FAST, CHILD, BROKEN, GOOD]
        (epyc,) = db.leaderboard("relu", device_name=EPYC, size="small")
        assert epyc.evaluations_by_status == {"correct": 1}  # the tally lost the pruned verdicts


def test_prune_by_status_and_problem(stored):
    assert stored("prune", "--status", "compile_error", "-p", "relu").stdout == "pruned 0 solutions with 0 evaluations\n"
    assert stored("prune", "--status", "compile_error", "--problem", "conv1d").stdout == "pruned 1 solution with 3 evaluations\n"
    with Database(stored.db_url) as db:
        assert [s.sha256 for s in db.solutions("conv1d")] == [GOOD]
        assert len(db.solutions("relu")) == 4


def test_leaderboard_rows_say_where_and_count_solutions_once(stored):
    """A row per problem and board; a rerun counts its solution once; fast_p's samples are the judged solutions the
    rows count; each kind of fast_p has its own name."""
    board = json.loads(stored("leaderboard", "--json").stdout)
    rows = {(r["problem"], r["device_name"], r["size"]): r for r in board["problems"]}
    assert list(rows) == [("relu", H100, "full"), ("relu", EPYC, "small"), ("conv1d", H100, "full")]
    relu = rows["relu", H100, "full"]
    assert (relu["evaluations_by_status"], relu["solutions_by_status"]) == ({"correct": 3}, {"correct": 2})
    assert rows["conv1d", H100, "full"]["solutions_by_status"] == {"compile_error": 1, "correct": 1}
    assert rows["relu", EPYC, "small"]["solutions_by_status"] == {"correct": 1, "skipped": 1}
    assert board["samples"] == 5 and board["fast_p"]["0.0"] == pytest.approx(4 / 5) and "status_counts" not in relu
    assert board["boards"] == [
        {"device_name": H100, "size": "full", "problems": 2, "problem_fast_p": {"0.0": 1.0, "1.0": 1.0, "1.5": 0.5, "2.0": 0.5},
         "geomean_speedup": pytest.approx((3.0 * 1.2) ** 0.5)},
        {"device_name": EPYC, "size": "small", "problems": 1, "problem_fast_p": {"0.0": 1.0, "1.0": 1.0, "1.5": 1.0, "2.0": 1.0},
         "geomean_speedup": pytest.approx(2.85)}]
    table = stored("leaderboard").stdout
    assert "solutions by" in table and "latest verdict" in table and FAST[:12] in table
    epyc = table.splitlines()[[i for i, line in enumerate(table.splitlines()) if "2.85" in line][0]]
    words = epyc.split()  # problem, best solution's file and SHA prefix, then level and device
    assert words[0] == "relu" and words[words.index(FAST[:12]) + 1:][:3] == ["1", "AMD", "EPYC"], table
    assert ("fast_1=0.80  fast_1.5=0.40  fast_2=0.40\n  (KernelBench's, over 5 samples, every device and size together)"
            in table)
    assert "AMD EPYC small: 1 problem judged\n  geomean best speedup=2.85, problem_fast_1=1.00 (best-of-k)" in table


def test_a_board_where_nothing_ran_counts_no_problem(tmp_path):
    """Best-of-k fast_p counts the problems whose code was judged on a board, as KernelBench's counts no skipped
    sample: once the fast kernel is gone, the small board holds the prose's skipped verdict alone."""
    from kforge.cli import board_summaries, summary_lines

    with Database(f"sqlite:///{tmp_path / 'k.db'}") as db:
        _fill(db, tmp_path)
        db.delete_solutions([FAST])
        rows = [r.model_dump() for r in db.boards()]
    boards = board_summaries(rows)
    assert [(b["device_name"], b["problems"], b["problem_fast_p"]) for b in boards] == [
        (H100, 2, {0.0: 1.0, 1.0: 1.0, 1.5: 0.0, 2.0: 0.0}), (EPYC, 0, {})]
    lines = summary_lines({"fast_p": {}, "samples": 0, "boards": boards})
    assert lines[-1] == "AMD EPYC small: no code judged (every verdict skipped or kforge's own failure)"


def test_leaderboard_csv_has_a_column_per_status(stored):
    text = stored("leaderboard", "--csv").stdout
    rows = list(csv.DictReader(io.StringIO(text)))
    assert "{" not in text and "status_counts" not in rows[0]
    conv1d = next(r for r in rows if r["problem"] == "conv1d")
    assert (conv1d["device_name"], conv1d["size"], conv1d["precision"]) == (H100, "full", "fp32")
    assert (conv1d["solutions_compile_error"], conv1d["solutions_correct"], conv1d["solutions_incorrect"]) == ("1", "1", "0")
    assert conv1d["n_evaluations"] == "4" and conv1d["best_sha256"] == GOOD


def test_after_deletions_in_many_chunks_the_standings_match_every_remaining_evaluation(tmp_path, monkeypatch):
    """What the tallies answer after a prune of many solutions, taken a few at a time, is what counting every
    evaluation that is left gives: counts, bests (among each solution's latest verdict, ties to the earliest), and
    each solution's latest verdict."""
    import random
    from collections import Counter

    from db import removal

    monkeypatch.setattr(removal, "_CHUNK", 3)
    rng = random.Random(7)
    with Database(f"sqlite:///{tmp_path / 'k.db'}") as db:
        for name in "AB":
            db.upsert_problem(name, 1, f"{name}.py", name)
            for i in range(8):
                db.upsert_solution(f"{name}{i}", name, "source")
        for _ in range(120):
            db.add_evaluation(f"{rng.choice('AB')}{rng.randrange(8)}", device="cuda", device_name=rng.choice(["H100", "cpu"]),
                              status=rng.choice(["correct", "correct", "incorrect", "skipped", "reference_error"]),
                              speedup=rng.choice([None, 0.5, 1.0, 2.0, 3.0]))
        doomed = [s.sha256 for s in db.solutions() if rng.random() < 0.5]
        assert db.delete_solutions(doomed).solutions == doomed
        runs = db.evaluations()
        assert not {r.solution_sha256 for r in runs} & set(doomed)
        for row in db.boards():
            mine = sorted((r for r in runs if r.problem == row.problem and r.device_name == row.device_name), key=lambda r: r.id)
            assert row.evaluations_by_status == Counter(r.status for r in mine)
            latest = {r.solution_sha256: r for r in mine}
            assert row.solutions_by_status == Counter(r.status for r in latest.values())
            timed = [r for r in latest.values() if r.status == "correct" and (r.speedup or 0) > 0]
            best = min(timed, key=lambda r: (-r.speedup, r.created_at, r.id), default=None)
            assert (row.best_speedup, row.best_sha256) == (best and best.speedup, best and best.solution_sha256)


def test_show_reads_only_the_solution_its_prefix_names(stored):
    """`kforge show PREFIX` asks the db for that prefix's evaluations (case ignored), not for every row."""
    broken = json.loads(stored("show", BROKEN[:3].upper(), "--json").stdout)
    assert [(r["solution_sha256"], r["status"]) for r in broken] == [(BROKEN, "compile_error")] * 3
    fast = json.loads(stored("show", "f", "--json").stdout)
    assert [r["speedup"] for r in fast] == [2.85, 3.0, 2.0]  # newest first
    err = stored("show", "e9", expect=2).stderr
    assert err.startswith("kforge: error: no stored evaluation for e9") and len(err.splitlines()) == 1, err
