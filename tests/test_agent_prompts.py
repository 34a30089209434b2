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


def run_turn_two(database, tmp_path, **archive) -> list[dict]:
    """Two turns of two samples (drafts cut off, so turn 1's parents come from the archive); the turn-1 requests."""
    cut = Reply(content="```python\nimport torch\nsrc = r\"\"\"\n", finish_reason="length")
    settings = EvalSettings(device="cpu", size="small", build_root=tmp_path / "builds")
    with FakeLLMServer([cut]) as server:
        provider = OpenAIChat(LLMSettings(base_url=server.url, model="fake-coder", api_key="k"))
        config = RunConfig(samples=2, turns=2, concurrency=1, out_dir=tmp_path / "out",  # requests in sample order
                           archive=ArchiveConfig(islands=2, exploit=1, explore=0, history=0, **archive))
        Loop(provider, database, settings, config).run(resolve_problem("relu"))
    return server.requests[2:]


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
