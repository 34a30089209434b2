"""Prompts with several programs: a refine request shows the archive's other kernels with their measured numbers,
a crossover request shows both parents with theirs; rendered directly, then as the agent loop sends them to the
scripted server on 127.0.0.1 from an archive stored in a real SQLite file."""

from __future__ import annotations

import pytest

from db import Database
from evaluator import EvalSettings, TimingStats
from evaluator.hardware import device_name
from fake_llm_server import FakeLLMServer, Reply
from pipeline.archive import ArchiveConfig
from pipeline.llm import LLMSettings, OpenAIChat
from pipeline.loop import Loop, RunConfig
from pipeline.retrieval import RetrievalConfig
from prompts import Program, chat_messages, crossover_messages
from prompts.render import render_inspirations
from reference_problems import resolve_problem

KERNELS = {  # sha: (island, source, speedup, median ms)
    "a" * 64: (0, 'src = r"""\n__global__ void k() { __shared__ float s[32]; }\n"""\nclass ModelNew: pass\n', 3.0, 0.25),
    "b" * 64: (0, 'src = r"""\nat::parallel_for(0, n, 1, f);\n"""\nclass ModelNew: pass\n', 1.5, 0.5),
    "c" * 64: (1, 'src = r"""\nconst float4* p;\n"""\nclass ModelNew: pass\n', 2.0, 0.375),
}
A, B, C = KERNELS


def stats(ms: float) -> dict:
    return TimingStats(median_ms=ms, mean_ms=ms, min_ms=ms, max_ms=ms, p20_ms=ms, p80_ms=ms, std_ms=0.0, cv=0.0, reps=10,
                       method="perf_counter").model_dump()


@pytest.fixture
def database(tmp_path):
    """relu with three correct kernels judged on this machine's CPU at the small size, placed in a 2-island archive."""
    where = device_name("cpu")
    with Database(f"sqlite:///{tmp_path / 'kforge.db'}") as db:
        db.upsert_problem("relu", 1, str(resolve_problem("relu").path), "h")
        for sha, (island, source, speedup, ms) in KERNELS.items():
            db.upsert_solution(sha, "relu", source, origin="generated")
            db.add_evaluation(sha, status="correct", device="cpu", device_name=where, size="small", speedup=speedup,
                              candidate_ms=ms, reference_ms=ms * speedup, timings={"candidate": stats(ms)})
            db.place_elite("relu", where, "small", island, f"cell-{sha[0]}", sha, speedup)
        yield db


def test_inspirations_and_crossover_render_each_program_with_its_numbers():
    fast = Program(source="class ModelNew: fast\n", speedup=3.0, median_ms=0.25, technique="shared_memory")
    slow = Program(source="class ModelNew: slow\n", speedup=1.5, median_ms=None, technique="parallel")
    text = render_inspirations([fast, slow], device_name="H100")
    assert "measured on H100" in text
    assert "Kernel 1: speedup 3x, median 0.25 ms, technique shared_memory.\n```python\nclass ModelNew: fast\n```" in text
    assert "Kernel 2: speedup 1.5x, technique parallel.\n```python\nclass ModelNew: slow\n```" in text
    (system, user) = crossover_messages(resolve_problem("relu"), fast, slow, target="cpu", size="small")
    assert system["role"] == "system" and user["content"].startswith("You write custom C++ kernels")
    assert "Kernel A: speedup 3x, median 0.25 ms" in user["content"] and "Kernel B: speedup 1.5x" in user["content"]
    assert user["content"].index("class ModelNew: fast") < user["content"].index("class ModelNew: slow")
    assert "faster than both" in user["content"]
    (_, user) = chat_messages(resolve_problem("relu"), [], target="cpu", size="small", contrast=(slow, fast),
                              device_name="H100")
    text = user["content"]
    assert "measured on H100; one is 2x as fast as the other" in text
    assert text.index("Slower kernel: speedup 1.5x, technique parallel.\n```python\nclass ModelNew: slow") < \
        text.index("Faster kernel: speedup 3x, median 0.25 ms, technique shared_memory.\n```python\nclass ModelNew: fast")
    assert text.endswith("say in two or three sentences what makes the faster kernel faster; then use that lesson in yours.")


def run_cut_off(database, tmp_path, problem: str, turns: int, **config) -> list[dict]:
    """Two samples a turn, every answer cut off (nothing is compiled); the requests the server got, in order."""
    cut = Reply(content="```python\nimport torch\nsrc = r\"\"\"\n", finish_reason="length")
    settings = EvalSettings(device="cpu", size="small", build_root=tmp_path / "builds")
    with FakeLLMServer([cut]) as server:
        provider = OpenAIChat(LLMSettings(base_url=server.url, model="fake-coder", api_key="k"))
        config = RunConfig(samples=2, turns=turns, concurrency=1, out_dir=tmp_path / "out", **config)  # sample order
        Loop(provider, database, settings, config).run(resolve_problem(problem))
    return server.requests


def run_turn_two(database, tmp_path, **archive) -> list[dict]:
    """Two turns (turn 1's parents come from the archive, the drafts being cut off); the turn-1 requests."""
    archive = ArchiveConfig(islands=2, exploit=1, explore=0, history=0, **archive)
    return run_cut_off(database, tmp_path, "relu", 2, archive=archive)[2:]


def test_refine_prompts_show_the_other_elites_with_their_numbers(database, tmp_path):
    island0, island1 = run_turn_two(database, tmp_path, inspirations=2)
    feedback = island0["messages"][-1]["content"]
    assert island0["messages"][-2]["content"] == f"```python\n{KERNELS[A][1].rstrip()}\n```"  # island 0's best: a
    assert "speedup 3x" in feedback  # the parent's own feedback
    assert f"Kernel 1: speedup 2x, median 0.375 ms, technique vectorized.\n```python\n{KERNELS[C][1].rstrip()}" in feedback
    assert f"Kernel 2: speedup 1.5x, median 0.5 ms, technique parallel.\n```python\n{KERNELS[B][1].rstrip()}" in feedback
    assert island1["messages"][-2]["content"] == f"```python\n{KERNELS[C][1].rstrip()}\n```"
    assert "Kernel 1: speedup 3x" in island1["messages"][-1]["content"]
    kinds = {(g.turn, g.sample): g.prompt_kind for g in database.generations("relu")}
    assert kinds == {(0, 0): "draft", (0, 1): "draft", (1, 0): "refine", (1, 1): "refine"}


def test_crossover_prompts_combine_two_elites_of_an_island(database, tmp_path):
    island0, island1 = run_turn_two(database, tmp_path, crossover=1.0)
    (system, user) = island0["messages"]
    text = user["content"]
    assert f"Kernel A: speedup 3x, median 0.25 ms, technique shared_memory.\n```python\n{KERNELS[A][1].rstrip()}" in text
    assert f"Kernel B: speedup 1.5x, median 0.5 ms, technique parallel.\n```python\n{KERNELS[B][1].rstrip()}" in text
    assert "Kernel A" not in island1["messages"][-1]["content"]  # island 1 holds one kernel: nothing to combine
    kinds = {(g.turn, g.sample): g.prompt_kind for g in database.generations("relu")}
    assert (kinds[(1, 0)], kinds[(1, 1)]) == ("crossover", "refine")


def test_contrast_prompts_show_a_slower_and_a_faster_elite_beside_the_parent(database, tmp_path):
    island0, island1 = run_turn_two(database, tmp_path, contrast=1.3)
    feedback = island0["messages"][-1]["content"]  # parent a (3x): the pair is b (1.5x) and c (2x)
    assert island0["messages"][-2]["content"] == f"```python\n{KERNELS[A][1].rstrip()}\n```"
    assert f"Slower kernel: speedup 1.5x, median 0.5 ms, technique parallel.\n```python\n{KERNELS[B][1].rstrip()}" in feedback
    assert f"Faster kernel: speedup 2x, median 0.375 ms, technique vectorized.\n```python\n{KERNELS[C][1].rstrip()}" in feedback
    assert "one is 1.33x as fast as the other" in feedback
    assert "Faster kernel: speedup 3x" in island1["messages"][-1]["content"]  # parent c: the pair is b and a
    kinds = {(g.turn, g.sample): g.prompt_kind for g in database.generations("relu")}
    assert (kinds[(1, 0)], kinds[(1, 1)]) == ("contrast", "contrast")


def test_a_new_problems_drafts_show_the_verified_kernel_of_the_nearest_problem(database, tmp_path):
    """relu's 3x kernel (on this machine's CPU, small size) is offered to gemm_bias_relu at a low threshold only;
    a matmul kernel stored beside it shares the GEMM and is offered first."""
    where = device_name("cpu")
    database.upsert_problem("matmul", 1, str(resolve_problem("matmul").path), "h")
    database.upsert_solution("d" * 64, "matmul", "# tiled matmul\nclass ModelNew: pass\n", origin="generated")
    database.add_evaluation("d" * 64, status="correct", device="cpu", device_name=where, size="small", speedup=1.25,
                            candidate_ms=0.8, reference_ms=1.0, timings={"candidate": stats(0.8)})
    first, second = run_cut_off(database, tmp_path, "gemm_bias_relu", 1, retrieval=RetrievalConfig(k=2, min_similarity=0.1))
    text = first["messages"][-1]["content"]
    assert f"measured on {where}" in text and second["messages"] == first["messages"]
    assert text.index("Problem matmul (operators matmul; similarity 0.67): speedup 1.25x, median 0.8 ms") < \
        text.index(f"Problem relu (operators relu; similarity 0.17): speedup 3x, median 0.25 ms, technique shared_memory.")
    assert {g.prompt_kind for g in database.generations("gemm_bias_relu")} == {"related"}
    (plain, _) = run_cut_off(database, tmp_path / "again", "gemm_bias_relu", 1, retrieval=RetrievalConfig())
    assert "Problem matmul" in plain["messages"][-1]["content"] and "Problem relu" not in plain["messages"][-1]["content"]
