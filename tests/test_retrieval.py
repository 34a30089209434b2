"""Cross-problem retrieval (pipeline/retrieval.py): operator signatures read from problem files in KernelBench's
layout (a small set of them in tests/fixtures/kernelbench), and the verified kernels a new problem is offered, from a
real SQLite file."""

from __future__ import annotations

from pathlib import Path

import pytest

from db import Database
from pipeline.retrieval import HEAVY, RetrievalConfig, input_ranks, related, signature, similarity
from prompts import chat_messages
from reference_problems import resolve_problem
from reference_problems.registry import load_problem_file

KERNELBENCH = Path(__file__).resolve().parent / "fixtures" / "kernelbench"
CONV2D, RELU, SWISH = "level1/3_Conv2d.py", "level1/2_ReLU.py", "level1/4_Swish.py"
MATMUL, BATCHED = "level1/1_Matmul.py", "level1/6_Batched_matmul.py"
FUSED, GEMM = "level2/1_Conv2d_ReLU_AddBias.py", "level2/2_Linear_Scale_LeakyReLU.py"
CONV_SWISH = "level2/3_Conv2d_Swish.py"
MATMUL_2D, MATMUL_3D = "level2/4_Matmul_AddBias.py", "level2/5_Batched_matmul_Scale.py"


def _kb(name: str) -> str:
    return (KERNELBENCH / name).read_text()


def _stem(name: str) -> str:
    return Path(name).stem


def test_the_fixture_is_in_kernelbench_format_with_its_level_from_the_folder():
    files = sorted(KERNELBENCH.glob("level*/*.py"))
    assert len(files) == 11
    for path in files:
        problem = load_problem_file(path)  # Model, get_inputs and get_init_inputs, read without running it
        assert problem.name == path.stem and problem.meta.level == int(path.parent.name.removeprefix("level"))


def test_a_signature_is_the_operators_the_model_calls_in_one_spelling_each():
    assert signature(_kb(FUSED)) == {"conv2d", "relu", "add"}  # self.conv(x) is named by nn.Conv2d, not "conv"
    assert signature(_kb(GEMM)) == {"matmul", "mul", "leakyrelu"}  # nn.Linear and nn.LeakyReLU, called as self.*
    assert signature(_kb("level1/5_LeakyReLU.py")) == {"leakyrelu"}  # F.leaky_relu: the same spelling
    assert signature(_kb(BATCHED)) == {"matmul"} == signature(_kb(MATMUL))  # torch.bmm is a matmul
    assert signature(_kb(SWISH)) == {"mul", "sigmoid"}  # arithmetic counts, super().__init__ does not
    assert input_ranks(_kb(MATMUL)) == (2, 2) and input_ranks(_kb(BATCHED)) == (3, 3)
    assert input_ranks(_kb(FUSED)) == (4,) and input_ranks(_kb(RELU)) == (2,)  # ReLU's input is a named local
    assert input_ranks(_kb(MATMUL_3D)) == (3, 3)
    assert signature("this is not python (") == frozenset() and input_ranks("x = 1") == ()


def _misses() -> list[tuple[str, str]]:
    """The level-2 problems whose most similar level-1 problem does not share their heavy operator."""
    level1 = {p.name: signature(p.read_text()) for p in sorted((KERNELBENCH / "level1").glob("*.py"))}
    misses = []
    for path in sorted((KERNELBENCH / "level2").glob("*.py")):
        ops = signature(path.read_text())
        nearest = max(level1, key=lambda name: similarity(ops, level1[name]))
        if not {op for op in ops if HEAVY.fullmatch(op)} & level1[nearest]:
            misses.append((path.name, nearest))
    return misses


def test_every_level2_problem_finds_a_level1_problem_that_shares_its_heavy_operator(monkeypatch):
    """What the heavy operators' weight buys: with every operator weighing 1, the conv2d + swish problem is
    nearest to Swish (two light operators shared) rather than to the convolution."""
    assert similarity(signature(_kb(CONV_SWISH)), signature(_kb(CONV2D))) == pytest.approx(4 / 6)
    assert similarity(signature(_kb(CONV_SWISH)), signature(_kb(SWISH))) == pytest.approx(2 / 6)
    assert _misses() == []
    monkeypatch.setattr("pipeline.retrieval.HEAVY_WEIGHT", 1.0)
    assert (Path(CONV_SWISH).name, Path(SWISH).name) in _misses()


def _store(db: Database, problem: str, sha: str, speedup: float, *, status: str = "correct", where: str = "H100",
           size: str = "full") -> None:
    db.upsert_solution(sha, problem, f"# kernel of {problem}, {speedup}x\nclass ModelNew: pass\n", origin="generated")
    db.add_evaluation(sha, status=status, device="cuda", device_name=where, size=size, speedup=speedup,
                      candidate_ms=1.0 / speedup, reference_ms=1.0)


def _fill(db: Database, problems: list[tuple[str, tuple[float, ...]]]) -> None:
    """Each problem's correct kernels on an H100 at these speedups, and two that must never be offered: an
    incorrect 9x one and a 20x one measured on another GPU."""
    for i, (name, speedups) in enumerate(problems):
        problem = _stem(name)
        db.upsert_problem(problem, int(name[len("level")]), str(KERNELBENCH / name), "h")
        for j, speedup in enumerate(speedups):
            _store(db, problem, f"{i}{j}".ljust(64, "0"), speedup)
        _store(db, problem, f"{i}b".ljust(64, "0"), 9.0, status="incorrect")
        _store(db, problem, f"{i}c".ljust(64, "0"), 20.0, where="A100")


@pytest.fixture
def database(tmp_path):
    """Three level-1 problems (conv2d, relu, matmul) with verified kernels; matmul's best is slower than PyTorch."""
    with Database(f"sqlite:///{tmp_path / 'kforge.db'}") as db:
        _fill(db, [(CONV2D, (3.0, 1.5)), (RELU, (2.0,)), (MATMUL, (0.9,))])
        yield db


def _related(database: Database, name: str, **config) -> list[tuple[str, float]]:
    return [(e.problem, e.speedup) for e in
            related(database, resolve_problem(str(KERNELBENCH / name)), "H100", "full", RetrievalConfig(**config))]


def test_a_fused_problem_is_offered_the_fastest_verified_kernels_of_its_nearest_problems(database):
    found = related(database, resolve_problem(str(KERNELBENCH / FUSED)), "H100", "full",
                    RetrievalConfig(k=2, min_similarity=0.1))
    assert [(e.problem, e.speedup) for e in found] == [(_stem(CONV2D), 3.0), (_stem(RELU), 2.0)]
    assert found[0].operators == ["conv2d"] and found[0].source.startswith(f"# kernel of {_stem(CONV2D)}, 3.0x")
    assert found[0].similarity == pytest.approx(4 / 6) and found[1].similarity == pytest.approx(1 / 6)
    assert _related(database, FUSED, k=2) == [(_stem(CONV2D), 3.0)]  # relu shares too little at 0.25
    assert _related(database, FUSED, k=2, min_speedup=5.0) == []  # the 9x is incorrect, the 20x another GPU's
    assert _related(database, GEMM) == []  # matmul's best (0.9x) is slower than PyTorch ...
    assert _related(database, GEMM, min_speedup=0.5) == [(_stem(MATMUL), 0.9)]  # ... and only that keeps it out
    assert _related(database, CONV2D) == []  # its own kernels (similarity 1) are not another problem's


def test_on_equal_scores_the_problem_whose_inputs_have_the_same_ranks_comes_first(tmp_path):
    """A 2-D and a batched matmul score the same against either fused matmul problem; the ranks of get_inputs'
    tensors decide, ahead of the names (which alone would put the batched one first)."""
    with Database(f"sqlite:///{tmp_path / 'kforge.db'}") as db:
        _fill(db, [(MATMUL, (2.0,)), (BATCHED, (1.5,))])
        assert _related(db, MATMUL_2D, k=1) == [(_stem(MATMUL), 2.0)]
        assert _related(db, MATMUL_3D, k=1) == [(_stem(BATCHED), 1.5)]
        assert _related(db, MATMUL_2D, k=2) == [(_stem(MATMUL), 2.0), (_stem(BATCHED), 1.5)]


def test_the_first_prompt_carries_the_related_kernels_with_their_numbers(database):
    problem = resolve_problem(str(KERNELBENCH / FUSED))
    found = related(database, problem, "H100", "full", RetrievalConfig(k=1))
    (_, user) = chat_messages(problem, [], related=found, device_name="H100")
    text = user["content"]
    assert "Kernels already verified for similar architectures, measured on H100" in text
    assert (f"Problem {_stem(CONV2D)} (operators conv2d; similarity 0.67): speedup 3x, median 0.3333 ms, technique"
            f" plain.\n```python\n# kernel of {_stem(CONV2D)}") in text
    assert text.index("You are given the following architecture") < text.index("Kernels already verified")
