"""KernelBench compatibility: a fake KernelBench checkout and run directory, imported and evaluated through the real
CLI; the layout mapping and KernelBench's fast_p (over ALL evaluated samples) on their own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import kforge_runner
from db import Database
from kforge import kernelbench
from reference_problems import ProblemError
from reference_problems.registry import load_problem_file

# KernelBench's level-1 ReLU problem as its checkout has it: no KFORGE_META, level and name come from the path.
RELU_PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """A ReLU."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 16
dim = 16384


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

# sample 0: a C++ kernel built with load_inline (CPU), correct
CPP_RELU = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>
torch::Tensor relu_fwd(torch::Tensor x) {
    TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == at::kFloat, "float32 CPU tensor expected");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const float* p = xc.data_ptr<float>();
    float* q = y.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) q[i] = p[i] > 0.f ? p[i] : 0.f;
    return y;
}
"""

ext = load_inline(name="kforge_test_kernelbench_relu", cpp_sources=source, functions=["relu_fwd"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_fwd(x)
'''

# sample 1: pure PyTorch, wrong (leaky where it should clamp)
WRONG_RELU = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.where(x > 0, x, 0.5 * x)
'''

# the solutions/<problem>/<name>.py layout, next to the KernelBench files: must keep working (pure PyTorch)
PLAIN_RELU = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.clamp_min(x, 0.0)
'''


def checkout(root: Path) -> Path:
    (root / "KernelBench" / "level1").mkdir(parents=True)
    (root / "KernelBench" / "level1" / "19_ReLU.py").write_text(RELU_PROBLEM)
    return root / "KernelBench"


@pytest.fixture
def kforge(tmp_path, build_root):
    """`python -m kforge ...` with its own HOME, db, problem dir and the session's build cache."""
    return kforge_runner(tmp_path, build_root, KFORGE_PROBLEMS_DIR=str(tmp_path / "problems"))


# -- the layout ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, sample", [
    ("level_1_problem_19_sample_0_kernel.py", (1, 19, 0)),
    ("level_3_problem_7_sample_12_kernel.py", (3, 7, 12)),
    ("level_1_problem_19_sample_0_prompt.txt", None),
    ("level_1_problem_19_sample_0_kernel.py.bak", None),
    ("19_ReLU.py", None),
    ("cpu_fused.py", None),
])
def test_sample_names(name, sample):
    assert kernelbench.sample_of(Path("runs/my_run") / name) == sample


def test_samples_map_to_the_imported_problem_of_their_level(tmp_path):
    for level, stem in ((1, "19_ReLU"), (2, "19_ConvTranspose2d_GELU_GroupNorm"), (1, "1_Square_matrix_multiplication_")):
        (tmp_path / "problems" / f"level{level}").mkdir(parents=True, exist_ok=True)
        (tmp_path / "problems" / f"level{level}" / f"{stem}.py").write_text(RELU_PROBLEM)
    problems = [load_problem_file(p) for p in (tmp_path / "problems").rglob("*.py")]
    run = tmp_path / "run"
    paths = [run / "level_1_problem_19_sample_0_kernel.py", run / "level_2_problem_19_sample_3_kernel.py",
             run / "level_1_problem_1_sample_0_kernel.py", run / "notes.py"]
    found = {p.name: problem.name for p, problem in kernelbench.problems_for(paths, problems).items()}
    assert found == {"level_1_problem_19_sample_0_kernel.py": "19_ReLU",
                     "level_2_problem_19_sample_3_kernel.py": "19_ConvTranspose2d_GELU_GroupNorm",
                     "level_1_problem_1_sample_0_kernel.py": "1_Square_matrix_multiplication_"}
    with pytest.raises(ProblemError, match=r"level 3 problem 19 is not imported \(and 1 more samples\); run kforge problems import"):
        kernelbench.problems_for([run / "level_3_problem_19_sample_0_kernel.py", run / "level_1_problem_2_sample_0_kernel.py"], problems)
    with pytest.raises(ProblemError, match=r"^level_1_problem_101_sample_0_kernel.py: KernelBench level 1 has no problem "
                       r"101: 2 level-1 problems are imported, numbered from 1 to 19$"):
        kernelbench.problems_for([run / "level_1_problem_101_sample_0_kernel.py"], problems)
    (tmp_path / "problems" / "level1" / "19_ReLU_v2.py").write_text(RELU_PROBLEM)
    problems.append(load_problem_file(tmp_path / "problems" / "level1" / "19_ReLU_v2.py"))
    with pytest.raises(ProblemError, match="level 1 problem 19 is ambiguous"):
        kernelbench.problems_for(paths, problems)


# -- fast_p -------------------------------------------------------------------------------------------------------

def test_fast_p_is_over_all_evaluated_samples(url):
    """KernelBench: count(correct and speedup > p) / n over every evaluated sample, not over per-problem bests."""
    db = Database(url)  # SQLite, and PostgreSQL when $KFORGE_TEST_POSTGRES_URL names one
    for level, name in ((1, "A"), (1, "B"), (2, "C")):
        db.upsert_problem(name, level, f"/{name}.py", name * 64)

    def sample(sha: str, problem: str, *verdicts: tuple[str, float | None], device_name: str = "H100") -> None:
        db.upsert_solution(sha * 64, problem, "source")
        for status, speedup in verdicts:
            db.add_evaluation(sha * 64, status=status, speedup=speedup, device="cuda", device_name=device_name, size="full")

    sample("a", "A", ("correct", 2.5))
    sample("b", "A", ("incorrect", None))
    sample("c", "A", ("correct", 3.0), ("correct", 0.8))  # rerun: only the latest verdict counts
    sample("d", "B", ("compile_error", None))
    sample("e", "B", ("skipped", None))  # never ran: no evaluated sample
    sample("f", "B", ("correct", None))  # correct, untimed: counts in n, never as fast
    sample("g", "C", ("correct", 1.2))
    sample("g", "C", ("correct", 1.6), device_name="A100")  # the same code on another device is another sample

    fast, n = kernelbench.fast_p(db, (0, 1, 1.5, 2))
    assert n == 7
    assert fast == {0.0: 4 / 7, 1.0: 3 / 7, 1.5: 2 / 7, 2.0: 1 / 7}
    assert kernelbench.fast_p(db, (0, 1, 2), problem="A") == ({0.0: 2 / 3, 1.0: 1 / 3, 2.0: 1 / 3}, 3)
    assert kernelbench.fast_p(db, (0, 1), level=1) == ({0.0: 2 / 5, 1.0: 1 / 5}, 5)
    assert kernelbench.fast_p(db, (0,), level=3) == ({}, 0)
    # what the per-problem best (db.fast_p) reports instead: not KernelBench's number
    assert db.problem_fast_p((0,), problem="A") == {0.0: 1.0} and db.problem_fast_p((1,), problem="A") == {1.0: 1.0}


# -- the CLI ------------------------------------------------------------------------------------------------------

def test_evaluate_a_kernelbench_run_directory(kforge, tmp_path):
    kb = checkout(tmp_path)
    run = tmp_path / "runs" / "my_run"
    run.mkdir(parents=True)
    (run / "level_1_problem_19_sample_0_kernel.py").write_text(CPP_RELU)
    (run / "level_1_problem_19_sample_1_kernel.py").write_text(WRONG_RELU)
    (run / "level_1_problem_19_sample_0_prompt.txt").write_text("not a candidate")

    # the problem is not imported yet: one line, exit 2, nothing stored
    proc = kforge("evaluate", str(run), "--device", "cpu", expect=2)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "level_1_problem_19_sample_0_kernel.py: KernelBench level 1 problem 19 is not imported (and 1 more samples)" in proc.stderr
    assert "run kforge problems import PATH first" in proc.stderr
    proc = kforge("submit", str(run / "level_1_problem_19_sample_1_kernel.py"), "--device", "cpu", expect=2)
    assert "KernelBench level 1 problem 19 is not imported" in proc.stderr
    assert Database(kforge.db_url).evaluations() == []

    imported = json.loads(kforge("problems", "import", str(kb), "--json").stdout)["imported"]
    assert [(p["name"], p["level"]) for p in imported] == [("19_ReLU", 1)]
    (run / "relu").mkdir()  # the solutions/<problem>/<name>.py layout, in the same tree
    (run / "relu" / "clamp.py").write_text(PLAIN_RELU)

    lines = [json.loads(ln) for ln in kforge("evaluate", str(run), "--device", "cpu", "--json").stdout.splitlines()]
    got = {Path(ln["path"]).name: (ln["problem"], ln["status"]) for ln in lines}
    assert got == {"level_1_problem_19_sample_0_kernel.py": ("19_ReLU", "correct"),
                   "level_1_problem_19_sample_1_kernel.py": ("19_ReLU", "cheat"),
                   "clamp.py": ("relu", "cheat")}, lines  # no kernel of its own (read from the code): kforge calls that cheat
    stored = {Path(s.path).name: s for s in Database(kforge.db_url).solutions()}
    sample0 = stored["level_1_problem_19_sample_0_kernel.py"]
    assert (sample0.problem, sample0.origin, sample0.seed_id) == ("19_ReLU", "generated", "kernelbench:level_1_problem_19_sample_0")
    assert stored["level_1_problem_19_sample_1_kernel.py"].seed_id == "kernelbench:level_1_problem_19_sample_1"
    assert (stored["clamp.py"].origin, stored["clamp.py"].seed_id) == ("submitted", None)
    assert {p.name: p.level for p in Database(kforge.db_url).problems()}["19_ReLU"] == 1

    # one file of the run directory on its own: its name says its problem; the stored verdict is reused
    again = json.loads(kforge("submit", str(run / "level_1_problem_19_sample_1_kernel.py"), "--device", "cpu", "--json").stdout)
    assert again["problem"] == "19_ReLU" and again["status"] == "cheat" and again["reused"]

    # fast_p over the 2 samples of 19_ReLU: 1 correct of 2 (a best-per-problem fast_0 would say 1.0)
    board = json.loads(kforge("leaderboard", "--problem", "19_ReLU", "--json").stdout)
    speedup = next(ln["speedup"] for ln in lines if ln["path"].endswith("sample_0_kernel.py"))
    assert board["samples"] == 2
    assert board["fast_p"] == {"0.0": 0.5, "1.0": 0.5 * (speedup > 1), "1.5": 0.5 * (speedup > 1.5), "2.0": 0.5 * (speedup > 2)}
    everything = json.loads(kforge("leaderboard", "--level", "1", "--json").stdout)
    assert everything["samples"] == 3 and everything["fast_p"]["0.0"] == pytest.approx(1 / 3)
    assert {r["problem"] for r in everything["problems"]} == {"19_ReLU", "relu"}
    imported = json.loads(kforge("leaderboard", "--suite", "kernelbench", "--level", "1", "--json").stdout)
    assert [(r["problem"], r["suite"]) for r in imported["problems"]] == [("19_ReLU", "kernelbench")]
    assert (imported["samples"], imported["suites"]) == (2, ["kernelbench"])  # kforge's relu left out
    assert json.loads(kforge("leaderboard", "--level", "2", "--json").stdout) == {
        "problems": [], "fast_p": {}, "samples": 0, "boards": [], "precision": "fp32", "level": 2, "suites": []}
    table = kforge("leaderboard").stdout
    assert "19_ReLU" in table and "fast_0=0.33" in table and "over 3 samples" in table
