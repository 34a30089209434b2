"""`kforge evaluate DIR` refuses what is no candidate as `submit` does: prose in a .py, a file without ModelNew, the
problem file itself. One line each, nothing stored for them (so nothing counted in fast_p), a summary of how many
and why; the rest is judged, and only a folder with no candidate at all is bad input (exit 2). A real SQLite file."""

from __future__ import annotations

import shutil

from conftest import ROOT, kforge_runner
from db import Database

CUT_OFF = "import torch\nsrc = '''\n__global__ void relu(\n"  # a candidate: judged `truncated` without a compile


def _folder(root, **files: str):
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def test_evaluate_refuses_non_candidates_and_stores_nothing_for_them(tmp_path):
    kforge = kforge_runner(tmp_path, tmp_path / "builds")
    answers = _folder(tmp_path / "answers", **{"a_prose.py": "Here is the kernel you asked for. It is fast.\n",
                                               "b_plain.py": "import torch\n", "c_cut.py": CUT_OFF})
    shutil.copy(ROOT / "reference_problems" / "relu.py", answers / "d_relu.py")
    proc = kforge("evaluate", str(answers), "--problem", "relu", "--device", "cpu")
    said = [line for line in proc.stderr.splitlines() if line.startswith("kforge: refused ")]
    assert [line.split(": ")[1] for line in said] == ["refused a_prose.py", "refused b_plain.py", "refused d_relu.py"], said
    assert said[0].endswith("not a kforge candidate") and "no line of Python code (prose?)" in said[0]
    assert proc.stderr.strip().endswith("kforge: 3 file(s) refused, not kforge candidates (1 no line of Python code "
                                        "(prose?), 2 no ModelNew defined at module level)"), proc.stderr
    with Database(kforge.db_url) as db:
        assert [(s.path, s.problem) for s in db.solutions()] == [(str(answers / "c_cut.py"), "relu")]
        assert [e.status for e in db.evaluations()] == ["truncated"]


def test_evaluate_of_a_folder_with_no_candidate_is_bad_input(tmp_path):
    kforge = kforge_runner(tmp_path, tmp_path / "builds")
    answers = _folder(tmp_path / "answers", **{"prose.py": "Sorry, I cannot help with that.\n"})
    said = kforge("evaluate", str(answers), "--problem", "relu", "--device", "cpu", expect=2).stderr.splitlines()
    assert said[0].startswith("kforge: refused prose.py: no line of Python code (prose?)"), said
    assert said[1:] == [f"kforge: error: no candidate .py files under {answers}: 1 file(s) refused, not kforge "
                        "candidates (1 no line of Python code (prose?))"], said
    assert not (tmp_path / "k.db").exists() or Database(kforge.db_url).evaluations() == []
