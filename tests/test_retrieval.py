"""Cross-problem retrieval (pipeline/retrieval.py): operator signatures read from KernelBench's own files, and the
verified kernels a new problem is offered, from a real SQLite file."""

from __future__ import annotations

from pathlib import Path

import pytest

from db import Database
from pipeline.retrieval import HEAVY, RetrievalConfig, input_ranks, related, signature, similarity
from prompts import chat_messages
from reference_problems import resolve_problem

KERNELBENCH = Path(__file__).resolve().parents[2] / "shared" / "kernelbench"
needs_kernelbench = pytest.mark.skipif(not KERNELBENCH.is_dir(), reason=f"no KernelBench checkout at {KERNELBENCH}")
CONV2D = "level1/50_conv_standard_2D__square_input__square_kernel.py"
RELU, MATMUL = "level1/19_ReLU.py", "level1/1_Square_matrix_multiplication_.py"
FUSED = "level2/1_Conv2D_ReLU_BiasAdd.py"


def _kb(name: str) -> str:
    return (KERNELBENCH / name).read_text()


@needs_kernelbench
def test_a_signature_is_the_operators_the_model_calls_in_one_spelling_each():
    assert signature(_kb(FUSED)) == {"conv2d", "relu", "add"}  # self.conv(x) is named by nn.Conv2d, not "conv"
    assert signature(_kb("level2/12_Gemm_Multiply_LeakyReLU.py")) == {"matmul", "mul", "leakyrelu"}  # nn.Linear
    assert signature(_kb(MATMUL)) == {"matmul"} and input_ranks(_kb(MATMUL)) == (2, 2)
    assert input_ranks(_kb(FUSED)) == (4,)
    assert signature("this is not python (") == frozenset() and input_ranks("x = 1") == ()


@needs_kernelbench
def test_every_level2_problem_finds_a_level1_problem_that_shares_its_heavy_operator():
    """What the heavy operators' weight buys: with every operator weighing 1, 37 of the 100."""
    level1 = {p.name: signature(p.read_text()) for p in (KERNELBENCH / "level1").glob("*.py")}
    misses = []
    for path in sorted((KERNELBENCH / "level2").glob("*.py")):
        ops = signature(path.read_text())
        nearest = max(level1, key=lambda name: similarity(ops, level1[name]))
        if not {op for op in ops if HEAVY.fullmatch(op)} & level1[nearest]:
            misses.append((path.name, nearest))
    assert misses == [], misses


def _store(db: Database, problem: str, sha: str, speedup: float, *, status: str = "correct", where: str = "H100",
           size: str = "full") -> None:
    db.upsert_solution(sha, problem, f"# kernel of {problem}, {speedup}x\nclass ModelNew: pass\n", origin="generated")
    db.add_evaluation(sha, status=status, device="cuda", device_name=where, size=size, speedup=speedup,
                      candidate_ms=1.0 / speedup, reference_ms=1.0)


@pytest.fixture
def database(tmp_path):
    """Three level-1 problems (conv2d, relu, matmul) with correct kernels on an H100, and kernels that must never
    be offered: an incorrect faster one and one from another GPU per problem; matmul's best is slower than PyTorch."""
    with Database(f"sqlite:///{tmp_path / 'kforge.db'}") as db:
        for i, (name, speedups) in enumerate(((CONV2D, (3.0, 1.5)), (RELU, (2.0,)), (MATMUL, (0.9,)))):
            problem = Path(name).stem
            db.upsert_problem(problem, 1, str(KERNELBENCH / name), "h")
            for j, speedup in enumerate(speedups):
                _store(db, problem, f"{i}{j}".ljust(64, "0"), speedup)
            _store(db, problem, f"{i}b".ljust(64, "0"), 9.0, status="incorrect")
            _store(db, problem, f"{i}c".ljust(64, "0"), 20.0, where="A100")
        yield db


def _related(database: Database, name: str, **config) -> list[tuple[str, float]]:
    return [(e.problem, e.speedup) for e in
            related(database, resolve_problem(str(KERNELBENCH / name)), "H100", "full", RetrievalConfig(**config))]


@needs_kernelbench
def test_a_fused_problem_is_offered_the_fastest_verified_kernels_of_its_nearest_problems(database):
    found = related(database, resolve_problem(str(KERNELBENCH / FUSED)), "H100", "full",
                    RetrievalConfig(k=2, min_similarity=0.1))
    assert [(e.problem, e.speedup) for e in found] == [(Path(CONV2D).stem, 3.0), (Path(RELU).stem, 2.0)]
    assert found[0].operators == ["conv2d"] and found[0].source.startswith("# kernel of 50_conv")
    assert found[0].similarity == pytest.approx(4 / 6) and found[1].similarity == pytest.approx(1 / 6)
    assert _related(database, FUSED, k=2) == [(Path(CONV2D).stem, 3.0)]  # relu shares too little at 0.25
    assert _related(database, FUSED, k=2, min_speedup=5.0) == []  # the 9x is incorrect, the 20x another GPU's
    assert _related(database, "level2/12_Gemm_Multiply_LeakyReLU.py") == []  # matmul's best is slower than PyTorch
    assert _related(database, CONV2D) == []  # its own kernels (similarity 1) are not another problem's


@needs_kernelbench
def test_the_first_prompt_carries_the_related_kernels_with_their_numbers(database):
    problem = resolve_problem(str(KERNELBENCH / FUSED))
    found = related(database, problem, "H100", "full", RetrievalConfig(k=1))
    (_, user) = chat_messages(problem, [], related=found, device_name="H100")
    text = user["content"]
    assert "Kernels already verified for similar architectures, measured on H100" in text
    assert ("Problem 50_conv_standard_2D__square_input__square_kernel (operators conv2d; similarity 0.67): speedup 3x,"
            " median 0.3333 ms, technique plain.\n```python\n# kernel of 50_conv") in text
    assert text.index("You are given the following architecture") < text.index("Kernels already verified")
