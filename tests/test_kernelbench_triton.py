"""The KernelBench run directory of Triton and CUDA candidates (tests/candidates/kernelbench_triton/, README there),
read as `kforge evaluate` reads a KernelBench run: each file mapped to its problem, its language read from its code,
and the README's tables true to the files. No kernel runs here: the GPU check judges them
(`bash scripts/device_check.sh languages`)."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

import pytest

from conftest import CANDIDATES, ROOT
from evaluator.contracts import EvalSettings
from evaluator.languages import Language, language_of
from evaluator.static import check_source
from kforge.cli import collect
from reference_problems import import_problems

HERE = CANDIDATES / "kernelbench_triton"
RUN = HERE / "run"
EXAMPLE = RUN / "model_ex_add" / "model_new_ex_add_triton.py"
KERNELBENCH = ROOT.parent / "shared" / "kernelbench"  # a KernelBench checkout beside the repo, where there is one
# git blob ids at KernelBench 423217d9fda91e0c2d67e4a43bf62f96f6d104f1 (src/kernelbench/prompts/)
KERNELBENCH_BLOBS = {EXAMPLE: "43a3f712615f40d76f505c3d37c143bf07298228",
                     HERE / "examples" / "level0" / "model_ex_add.py": "9016fb0ef2ff849e5233aea86b70514bcf745e0e"}
STUB = "import torch\n\n\nclass Model(torch.nn.Module):\n    pass\n\n\ndef get_inputs():\n    return []\n\n\ndef get_init_inputs():\n    return []\n"


def _tables() -> dict[str, list[list[str]]]:
    """The README's tables by their first header cell's row: 'file | problem | ...' -> rows of cells (backticks off)."""
    tables: dict[str, list[list[str]]] = {}
    rows: list[list[str]] | None = None
    for line in (HERE / "README.md").read_text().splitlines():
        if not line.startswith("|"):
            rows = None
            continue
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split(" | ")]
        if rows is None:
            rows = tables.setdefault(" | ".join(cells), [])
        elif not set(line) <= set("|-: "):  # not the header's rule
            rows.append(cells)
    return tables


FILES = _tables()["file | problem | language | expected"]
WRONG = _tables()["file | bug | what the check sees"]


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def test_the_readme_lists_every_file_once():
    listed = [row[0] for row in FILES]
    assert len(listed) == len(set(listed))
    assert sorted(listed) == sorted(str(p.relative_to(RUN)) for p in RUN.rglob("*.py"))


def test_each_file_maps_to_its_problem_as_kforge_evaluate_reads_a_kernelbench_run(tmp_path, monkeypatch):
    """Level-1 problems under the README's names (stubs: only the name and level count here), and the example's
    problem imported as it is; `kforge evaluate`'s own collection then names each file's problem."""
    (tmp_path / "level1").mkdir()
    for name in {row[1] for row in FILES if row[1][0].isdigit()}:
        (tmp_path / "level1" / f"{name}.py").write_text(STUB)
    (tmp_path / "level2").mkdir()  # the same numbers at another level: the level in a file's name must count
    for number in {row[1].split("_")[0] for row in FILES if row[1][0].isdigit()}:
        (tmp_path / "level2" / f"{number}_Other.py").write_text(STUB)
    imported, skipped = import_problems(HERE / "examples", tmp_path)
    assert [p.name for p in imported] == ["model_ex_add"] and not skipped
    monkeypatch.setenv("KFORGE_PROBLEMS_DIR", str(tmp_path))
    mapped = {str(job.path.relative_to(RUN.resolve())): job.problem.name for job in collect(RUN, None, EvalSettings())[0]}
    assert mapped == {row[0]: row[1] for row in FILES}


@pytest.mark.skipif(not KERNELBENCH.is_dir(), reason="no KernelBench checkout beside the repo")
def test_the_problems_are_kernelbench_level_1_problems():
    names = {p.stem for p in (KERNELBENCH / "level1").glob("*.py")}
    assert {row[1] for row in FILES if row[1][0].isdigit()} <= names


@pytest.mark.parametrize("row", FILES, ids=[row[0] for row in FILES])
def test_each_file_is_a_candidate_in_its_language(row):
    source = (RUN / row[0]).read_text()
    check = check_source(source)
    assert language_of(source) is Language(row[2]) and check.language is Language(row[2]) and check.status is None
    assert check.needs_cuda == (row[2] == "cuda")  # a Triton file runs interpreted on a CPU; a CUDA one waits for a GPU


def test_the_wrong_on_purpose_table_lists_exactly_the_files_expected_incorrect():
    expected = {row[0] for row in FILES if row[3] == "incorrect"}
    assert {row[0] for row in WRONG} == expected and len(expected) >= 3
    assert {row[3] for row in FILES} == {"correct", "incorrect"}
    said = {row[0] for row in FILES if _docstring(RUN / row[0]).startswith("Wrong on purpose")}
    assert said == expected


def test_every_dot_keeps_float32_as_float32():
    """KernelBench's fp32 problems are judged at 1e-4 against a strict-fp32 reference: no TF32 dots."""
    dots = 0
    for path in RUN.glob("level_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "dot":
                dots += 1
                precision = {k.arg: k.value.value for k in node.keywords if isinstance(k.value, ast.Constant)}
                assert precision.get("input_precision") == "ieee", path.name
    assert dots >= 3


@pytest.mark.parametrize("path", list(KERNELBENCH_BLOBS), ids=lambda p: p.name)
def test_kernelbench_example_files_are_byte_for_byte_kernelbench(path):
    data = path.read_bytes()
    assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == KERNELBENCH_BLOBS[path]
