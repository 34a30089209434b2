"""`kforge leaderboard --suite` over a stored SQLite file, run as users run it (`python -m kforge`, piped at 80
columns): KernelBench's imported problems and kforge's own share a level, and a board of one suite holds its
problems alone, with fast_p over its samples alone and a summary that names it."""

from __future__ import annotations

import csv
import io
import json

import pytest

from conftest import kforge_runner
from db import Database
from kforge import kernelbench

EPYC = "AMD EPYC"


def _fill(db: Database, tmp_path) -> None:
    """Level 1 holds kforge's relu (a 3x kernel) and KernelBench's 19_ReLU (a 1.5x kernel and a wrong one); level 2
    holds KernelBench's 12_Gemm_Multiply_LeakyReLU (a 2x kernel)."""
    imported = tmp_path / "problems"
    for name, level, path in [("relu", 1, tmp_path / "reference_problems" / "relu.py"),
                              ("19_ReLU", 1, imported / "level1" / "19_ReLU.py"),
                              ("12_Gemm_Multiply_LeakyReLU", 2, imported / "level2" / "12_Gemm_Multiply_LeakyReLU.py")]:
        db.upsert_problem(name, level, str(path), name)
    for sha, problem, status, speedup in [("a0" * 32, "relu", "correct", 3.0), ("b0" * 32, "19_ReLU", "correct", 1.5),
                                          ("b1" * 32, "19_ReLU", "incorrect", None),
                                          ("c0" * 32, "12_Gemm_Multiply_LeakyReLU", "correct", 2.0)]:
        db.upsert_solution(sha, problem, "source")
        db.add_evaluation(sha, status=status, device="cpu", device_name=EPYC, size="small", speedup=speedup)


@pytest.fixture
def stored(tmp_path, build_root):
    kforge = kforge_runner(tmp_path, build_root)
    kforge.env["COLUMNS"] = "80"  # piped, as in an 80-column terminal
    with Database(kforge.db_url) as db:
        _fill(db, tmp_path)
    return kforge


def _lines(text: str) -> list[str]:
    lines = text.splitlines()
    assert lines and max(map(len, lines)) <= 80, "\n".join(line for line in lines if len(line) > 80)
    return lines


def test_a_suite_is_read_from_where_its_problem_file_was_registered(tmp_path):
    assert kernelbench.suite_of(tmp_path / "problems" / "level1" / "19_ReLU.py") == "kernelbench"
    assert kernelbench.suite_of("/src/KernelBench/level3/9_ResNet18.py") == "kernelbench"
    for path in ("/repo/reference_problems/relu.py", "/tmp/level1/relu.py", "/tmp/mine/19_ReLU.py"):
        assert kernelbench.suite_of(path) == "kforge", path


def test_the_kernelbench_suite_boards_only_its_own_problems(stored):
    board = json.loads(stored("leaderboard", "--suite", "kernelbench", "--level", "1", "--json").stdout)
    assert [(r["problem"], r["suite"]) for r in board["problems"]] == [("19_ReLU", "kernelbench")]
    assert (board["suites"], board["level"], board["samples"]) == (["kernelbench"], 1, 2)
    assert board["fast_p"] == {"0.0": 0.5, "1.0": 0.5, "1.5": 0.0, "2.0": 0.0}
    assert board["boards"][0]["geomean_speedup"] == pytest.approx(1.5)
    lines = _lines(stored("leaderboard", "--suite", "kernelbench", "--level", "1").stdout)
    assert not any(line.split()[:1] == ["relu"] for line in lines), lines
    summary = lines[next(i for i, line in enumerate(lines) if line.startswith("fast_0=")) - 1:]
    assert summary == ["suite kernelbench, level 1", "fast_0=0.50  fast_1=0.50  fast_1.5=0.00  fast_2=0.00",
                       "  (KernelBench's, over 2 samples)", "AMD EPYC small: 1 problem judged",
                       "  geomean best speedup=1.5, problem_fast_1=1.00 (best-of-k)"]


def test_the_kforge_suite_and_both_together(stored):
    mine = json.loads(stored("leaderboard", "--suite", "kforge", "--json").stdout)
    assert [r["problem"] for r in mine["problems"]] == ["relu"] and (mine["samples"], mine["suites"]) == (1, ["kforge"])
    lines = _lines(stored("leaderboard", "--level", "1").stdout)
    assert "suites kernelbench and kforge together, level 1 (--suite picks one)" in lines, lines
    assert "  (KernelBench's, over 3 samples)" in lines, lines
    both = json.loads(stored("leaderboard", "--json").stdout)
    assert {r["problem"]: r["suite"] for r in both["problems"]} == {
        "relu": "kforge", "19_ReLU": "kernelbench", "12_Gemm_Multiply_LeakyReLU": "kernelbench"}
    assert (both["suites"], both["level"], both["samples"]) == (["kernelbench", "kforge"], None, 4)


def test_csv_names_each_rows_suite_and_a_bad_suite_is_one_line(stored):
    rows = list(csv.DictReader(io.StringIO(stored("leaderboard", "--csv", "--suite", "kernelbench").stdout)))
    assert [(r["problem"], r["suite"]) for r in rows] == [("19_ReLU", "kernelbench"),
                                                          ("12_Gemm_Multiply_LeakyReLU", "kernelbench")]
    refused = stored("leaderboard", "--suite", "kernelbenh", expect=2)
    assert refused.stderr == "kforge: error: --suite must be kernelbench or kforge, not 'kernelbenh'\n"
