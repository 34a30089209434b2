"""Problem names as a user meets them: a typo answered with the names it most likely meant (one line, not the
whole registry), and `kforge problems` in KernelBench's numbered order, filtered by level."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import SOLUTIONS, kforge_runner
from reference_problems.registry import ProblemError, import_problems, list_problems, resolve_problem

FIXTURE = Path(__file__).parent / "fixtures" / "kernelbench"


@pytest.fixture
def user_dir(tmp_path) -> Path:
    import_problems(FIXTURE, tmp_path / "problems")
    return tmp_path / "problems"


@pytest.mark.parametrize("typed, meant", [("scale_bias_hardswsh", "scale_bias_hardswish"), ("sofmax", "softmax"),
                                          ("conv1", "conv1d")])
def test_a_typo_names_what_it_likely_meant_in_one_line(typed, meant):
    with pytest.raises(ProblemError) as caught:
        resolve_problem(typed)
    message = str(caught.value)
    assert "\n" not in message and len(message) < 300, message
    assert meant in message.split("did you mean ", 1)[1].split("?")[0].split(", ")
    assert f"lists all {len(list_problems())}" in message


def test_a_name_like_nothing_suggests_nothing():
    with pytest.raises(ProblemError, match=r"^unknown problem 'zzzz' \(`kforge problems` lists all \d+\)$"):
        resolve_problem("zzzz")


def test_numbered_names_sort_by_their_numbers(user_dir):
    numbered = [p.name for p in list_problems(user_dir) if p.name[0].isdigit() and p.meta.level == 1]
    numbers = [int(name.split("_", 1)[0]) for name in numbered]
    assert len(numbers) >= 3 and numbers == sorted(numbers), numbered


def test_kforge_problems_filters_by_level(tmp_path, build_root):
    run = kforge_runner(tmp_path, build_root)
    run("problems", "import", str(FIXTURE))
    rows = json.loads(run("problems", "--level", "2", "--json").stdout)
    assert rows and {r["level"] for r in rows} == {2}
    failed = run("submit", str(SOLUTIONS / "softmax" / "cpu_softmax_o3.py"), "--problem", "sofmax", expect=2)
    assert "did you mean softmax" in failed.stderr and failed.stderr.count("\n") <= 2, failed.stderr
