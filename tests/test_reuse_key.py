"""A verdict belongs to the work it judged: a stored verdict stands only for the same problem file at the same size,
and a problem file that shares a registered problem's name but not its content is a problem of its own."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, kforge_runner

HONEST_RELU = ROOT / "tests" / "adversarial" / "forward" / "honest.py"


def _submit(kforge, problem: str, candidate=HONEST_RELU) -> dict:
    out = kforge("submit", str(candidate), "--problem", problem, "--device", "cpu", "--size", "small", "--json").stdout
    return json.loads(next(line for line in out.splitlines() if line.startswith("{")))


@pytest.mark.slow
def test_a_problem_of_the_same_name_with_other_content_is_judged_afresh(tmp_path, adversarial_build_root):
    """Before: the honest ReLU's stored `correct` was taken back for a copy of relu.py that doubles its output,
    and a rerun's `incorrect` there was then stored under the real relu and returned for it. Now the copy is a
    problem of its own: the same code for it is refused in one line (a solution belongs to one problem), its own
    copy is judged afresh, and the real relu's verdict stands."""
    kforge = kforge_runner(tmp_path, adversarial_build_root)
    real = _submit(kforge, "relu")
    copy = tmp_path / "elsewhere" / "relu.py"
    copy.parent.mkdir()
    copy.write_text((ROOT / "reference_problems" / "relu.py").read_text().replace("torch.relu(x)", "torch.relu(x) * 2"))
    said = kforge("submit", str(HONEST_RELU), "--problem", str(copy), "--device", "cpu", "--json", expect=2).stderr
    twin = tmp_path / "honest_twin.py"  # the same kernel as another file's bytes: a solution of the copy's own
    twin.write_text(HONEST_RELU.read_text() + "# the same kernel\n")
    doubled = _submit(kforge, str(copy), twin)
    again = _submit(kforge, "relu")
    assert "already stored for problem 'relu'" in said, said
    assert real["status"] == "correct" and not real["reused"], real
    assert doubled["status"] == "incorrect" and not doubled["reused"], doubled
    assert doubled["problem"].startswith("relu@") and doubled["problem"] != real["problem"], doubled
    assert again["status"] == "correct" and again["reused"] and again["evaluation_id"] == real["evaluation_id"], again
