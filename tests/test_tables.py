"""The CLI's tables at 80 columns: no line wider than the terminal, no word split across lines."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from db import SpendRow
from kforge import tables

CAUSE = ("RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
         "NumCudaDevices() that might have already set an error?")
LINES = [
    {"status": "correct", "speedup": 1.05, "problem": "avg_pool_2d", "solution_sha256": "ab" * 32,
     "path": "solutions/avg_pool_2d/repair_001_int64_index.py", "cause": "correct in 3 trials", "hint": "",
     "candidate_ms": 6.25, "reference_ms": 6.55},
    {"status": "runtime_error", "speedup": None, "problem": "12_Matmul_with_diagonal_matrices_", "solution_sha256": "cd" * 32,
     "path": "solutions/avg_pool_2d/seed_001_a73418884c619a93.py", "cause": CAUSE, "hint": "check the launch bounds",
     "candidate_ms": None, "reference_ms": 5.46},
    {"status": "compile_error", "speedup": None, "problem": "conv1d", "solution_sha256": "ef" * 32, "path": None,
     "cause": "error: identifier \"blockDim\" is undefined in main.cu line 12", "hint": "", "candidate_ms": None,
     "reference_ms": None},
]
ROWS = [{"problem": "12_Matmul_with_diagonal_matrices_", "level": 1, "best_speedup": 0.574, "speedup_vs_compile": 0.61,
         "best_path": "runs/level1/sample_0123456789abcdef0123.py", "best_sha256": "9f" * 32, "candidate_ms": 0.018,
         "reference_ms": 0.0104, "device_name": "NVIDIA H100 80GB HBM3", "size": "full",
         "solutions_by_status": {"correct": 3, "runtime_error": 1, "reference_error": 2}},
        {"problem": "relu", "level": 1, "best_speedup": None, "speedup_vs_compile": None, "best_path": None,
         "best_sha256": None, "candidate_ms": None, "reference_ms": None, "device_name": None, "size": None,
         "solutions_by_status": {}}]


def _render(renderable, width: int) -> list[str]:
    console = Console(width=width, file=io.StringIO(), color_system=None, legacy_windows=False)
    console.print(renderable)
    return console.file.getvalue().splitlines()


def _whole(words: list[str], lines: list[str]) -> list[str]:
    """The words that no single output line holds whole."""
    return [w for w in words if not any(w in line for line in lines)]


@pytest.mark.parametrize("width", [80, 100, 160])
def test_results_keep_words_whole_and_fit(width):
    lines = _render(tables.results(LINES), width)
    assert max(map(len, lines)) <= width, "\n".join(lines)
    words = [w for ln in LINES for w in [*ln["problem"].split("_"), ln["status"], *(ln["cause"] + " " + ln["hint"]).split()]
             if ln["status"] != "correct" or w in (*ln["problem"].split("_"), ln["status"])]
    words += ["int64_index.py", "seed_001_a7341888….py", "efefefefefef", "1.05", "6.25", "5.46", "abababababab", "cdcdcdcdcdcd"]
    assert _whole(words, lines) == [], "\n".join(lines)


@pytest.mark.parametrize("width", [80, 160])
def test_leaderboard_keeps_words_whole_and_fits(width):
    """Each row says where its speedup was measured, names its counts, and shows the sha256 prefix `show` takes."""
    lines = _render(tables.leaderboard(ROWS, width), width)
    assert max(map(len, lines)) <= width, "\n".join(lines)
    words = ["0.574", "sample_01234567….py", "correct 3", "runtime_error 1", "reference_error 2", "NVIDIA H100",
             "80GB HBM3", "full", "9f9f9f9f9f9f", "solutions by", "latest verdict",
             "12_Matmul_with_diagonal_…" if width < tables.WIDE else ROWS[0]["problem"]]
    assert _whole(words + (["0.61", "0.018"] if width >= tables.WIDE else []), lines) == [], "\n".join(lines)
    assert "9f9f9f9f9f9f9" not in "".join(lines)  # the prefix `show` is given, not the whole hash
    relu = next(line for line in lines if line.lstrip().startswith("relu"))
    assert relu.split()[1:] == ["-", "1", "-", "-", *(["-"] * 3 if width >= tables.WIDE else []), "-"], relu


def test_leaderboard_csv_has_one_value_per_cell():
    """The counts are flat columns, one per status, named for what they count: no JSON inside a cell."""
    fields = ["problem", "level", "n_solutions", "evaluations_by_status", "best_speedup", "best_sha256",
              "best_device_name", "best_size", "device_name", "size", "precision", "solutions_by_status"]
    rows = [{**ROWS[0], "n_solutions": 6, "evaluations_by_status": {"correct": 9}, "best_device_name": "x",
             "best_size": "full", "precision": "fp32"}]
    columns, flat = tables.leaderboard_csv(fields, rows, ["correct", "incorrect", "runtime_error"])
    assert columns == ["problem", "level", "device_name", "size", "precision", "n_solutions", "best_speedup", "best_sha256",
                       "solutions_correct", "solutions_incorrect", "solutions_runtime_error"]
    assert flat == [{"problem": ROWS[0]["problem"], "level": 1, "device_name": "NVIDIA H100 80GB HBM3", "size": "full",
                     "precision": "fp32", "n_solutions": 6, "best_speedup": 0.574, "best_sha256": "9f" * 32,
                     "solutions_correct": 3, "solutions_incorrect": 0, "solutions_runtime_error": 1}]


@pytest.mark.parametrize("width", [80, 160])
def test_spend_keeps_words_whole_and_fits(width):
    rows = [SpendRow(problem="12_Matmul_with_diagonal_matrices_", model="Qwen/Qwen2.5-Coder-32B-Instruct", calls=12,
                     prompt_tokens=123456, completion_tokens=65432, cost_usd=1.2345, unpriced=0),
            SpendRow(problem="relu", model="gpt-4o", calls=3, prompt_tokens=300, completion_tokens=150, cost_usd=0.0,
                     unpriced=3)]
    lines = _render(tables.spend(rows, "run 3: spend"), width)
    assert max(map(len, lines)) <= width, "\n".join(lines)
    words = ["Matmul", "diagonal", "Qwen/", "Coder-", "Instruct", "calls", "tok in", "tok out", "USD", "unpriced",
             "123456", "65432", "1.2345", "gpt-4o"]
    assert _whole(words, lines) == [], "\n".join(lines)
    assert any(line.split()[-5:] == ["3", "300", "150", "-", "3"] for line in lines), "\n".join(lines)


def test_evidence_reads_as_lines_with_texts_kept_whole():
    from kforge.tables import evidence_lines

    lines = evidence_lines({"stage": "compile", "cause": "compile_error: \u2018at::Tensor\u2019 has no member named \u2018foo\u2019",
                            "log_tail": "Traceback (most recent call last):\n  File \"x.py\", line 3\nRuntimeError: boom",
                            "max_abs_err": 1.2345678e-05, "stage_s": {"compile_child": 12.5, "load": 0.5, "empty": None},
                            "gpu": None, "checked_calls": [1, 7]})
    assert lines[:2] == ["stage: compile", "cause: compile_error: \u2018at::Tensor\u2019 has no member named \u2018foo\u2019"]
    assert lines[2:6] == ["log_tail:", "  Traceback (most recent call last):", "    File \"x.py\", line 3", "  RuntimeError: boom"]
    assert lines[6:] == ["max_abs_err: 1.235e-05", "stage_s: compile_child=12.5, load=0.5", "checked_calls: 1, 7"]


@pytest.mark.parametrize("name, width, capped", [
    ("75_conv_transposed_2D_asymmetric_input", 24, "75_conv_transposed_2D_…"),
    ("75_conv_transposed_2D_asymmetric_input", 38, "75_conv_transposed_2D_asymmetric_input"),
    ("supercalifragilistic_x", 8, "supercalifragilistic_…"),  # the first part is kept whole, past the width
    ("Qwen/Qwen2.5-Coder-32B-Instruct", 20, "Qwen/Qwen2.5-Coder-…"),
])
def test_a_capped_name_ends_after_a_whole_part(name, width, capped):
    assert tables.cap(name, width, breaks="/-" if "/" in name else "_") == capped


def test_a_kernelbench_sample_is_named_by_its_number_and_a_hash_file_by_nothing():
    sha = "ab" * 32
    assert tables.solution_label("run/level_1_problem_19_sample_3_kernel.py", sha) == "sample 3"
    assert tables.solution_label(f"out/relu/{sha}.py", sha) == ""
    assert tables.solution_label("solutions/relu/seed_001_a73418884c619a93.py", sha) == "seed_001_a7341888….py"
