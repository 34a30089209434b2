"""The agent loop's archive and dedupe, wired: islands recorded per call against the scripted server on 127.0.0.1,
a near-duplicate answer not evaluated twice (real evaluator), and (slow: one compile) a correct kernel filling each
island's grid and becoming the parent of the next turn."""

from __future__ import annotations

import pytest

from db import Database
from evaluator import EvalSettings
from fake_llm_server import FIXED_RELU, FakeLLMServer, Reply, answer
from pipeline.archive import ArchiveConfig
from pipeline.llm import LLMSettings, OpenAIChat
from pipeline.loop import Loop, RunConfig
from reference_problems import resolve_problem

PY_ONLY = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """No compiled extension: judged, and caught, without a compile."""

    def forward(self, x):
        return torch.relu(x)
'''
PY_ONLY_TWIN = PY_ONLY.replace("    def forward", "    # the same code, reformatted\n\n    def  forward").replace(
    '"""No compiled extension: judged, and caught, without a compile."""', '"""No compiled extension: judged, and caught, without a compile."""  # !')


def loop(server: FakeLLMServer, database: Database, settings: EvalSettings, tmp_path, **config) -> Loop:
    provider = OpenAIChat(LLMSettings(base_url=server.url, model="fake-coder", api_key="k"))
    return Loop(provider, database, settings, RunConfig(out_dir=tmp_path / "generations", **config))


def test_islands_are_recorded_per_sample_and_refine_prompts_follow_drafts(tmp_path, database, settings):
    cut = [Reply(content=f"```python\nimport torch\n# {i}\nsrc = r\"\"\"\n", finish_reason="length") for i in range(6)]
    with FakeLLMServer(lambda body, i: cut[i]) as server:
        result = loop(server, database, settings, tmp_path, samples=3, turns=2,
                      archive=ArchiveConfig(islands=2)).run(resolve_problem("relu"))
    gens = sorted(database.generations("relu"), key=lambda g: (g.turn, g.sample))
    assert [(g.turn, g.sample, g.island, g.prompt_kind) for g in gens] == [
        (0, 0, 0, "draft"), (0, 1, 1, "draft"), (0, 2, 0, "draft"),
        (1, 0, 0, "refine"), (1, 1, 1, "refine"), (1, 2, 0, "refine")]
    assert [c.island for c in result.candidates] == [0, 1, 0, 0, 1, 0]
    assert database.archive("relu", result.candidates[0].verdict.device_name, "small") == []  # nothing correct yet


def test_a_near_duplicate_is_not_evaluated_twice(tmp_path, database, settings):
    replies = [Reply(content=answer(PY_ONLY, "plain torch")), Reply(content=answer(PY_ONLY_TWIN, "the same, again"))]
    with FakeLLMServer(lambda body, i: replies[i]) as server:
        result = loop(server, database, settings, tmp_path, samples=2, concurrency=1).run(resolve_problem("relu"))
    first, twin = result.candidates
    assert first.path != twin.path  # different bytes ...
    assert first.status == twin.status == "cheat" and "no kernel of its own" in first.verdict.evidence.cause
    assert [e.solution_sha256 for e in database.evaluations("relu")] == [first.verdict.solution_sha256]  # ... judged once
    assert twin.duplicate_of == first.verdict.solution_sha256 and first.duplicate_of is None
    assert database.get_solution(twin.path.stem).normalized_sha256 == database.get_solution(first.path.stem).normalized_sha256
    with FakeLLMServer(lambda body, i: Reply(content=answer(PY_ONLY_TWIN.replace("# !", "# again"), "later"))) as server:
        # another temperature: another request, not the first run's cached answer
        (later,) = loop(server, database, settings, tmp_path, temperature=0.5).run(resolve_problem("relu")).candidates
    assert not later.cached and later.duplicate_of == first.verdict.solution_sha256  # a twin stored earlier counts too
    assert len(database.evaluations("relu")) == 1


@pytest.mark.slow
def test_a_correct_kernel_fills_every_island_and_is_refined_next_turn(tmp_path, database, settings):
    """Both islands draft the same kernel (reformatted for the second: compiled once), so each grid gets it in the
    cell its speedup and at::parallel_for name; the next turn's refine prompts carry it, and migration leaves the
    islands as they are (each already holds that best)."""
    twin = FIXED_RELU.replace("    return out;", "    // done\n    return out;")
    with FakeLLMServer(lambda body, i: Reply(content=answer([FIXED_RELU, twin][i % 2], f"draft {i}"))) as server:
        result = loop(server, database, settings, tmp_path, samples=2, turns=2,
                      archive=ArchiveConfig(islands=2, migration_interval=1, speedup_edges=[1e-9])).run(resolve_problem("relu"))
        refine_prompts = [body["messages"] for body in server.requests[2:]]
    first = result.candidates[0]
    assert first.status == "correct", first.verdict.evidence.cause
    assert len(database.evaluations("relu")) == 1
    members = database.archive("relu", first.verdict.device_name, "small")
    assert {(m.island, m.cell, m.solution_sha256) for m in members} == {
        (0, ">=1e-09|parallel", first.verdict.solution_sha256), (1, ">=1e-09|parallel", first.verdict.solution_sha256)}
    assert all("speedup" in messages[-1]["content"] and "total_elems" in messages[-2]["content"]
               for messages in refine_prompts)
    assert result.migrations == []


def test_an_answer_is_judged_while_a_later_call_is_still_in_flight(tmp_path, database, settings):
    """The first call answers at once (cut off), the second after 2 s (judged by the real evaluator): the first answer
    is judged before the second arrives, where a turn used to wait for all its answers; the turn still reports both
    in sample order."""
    def script(body: dict, index: int) -> Reply:
        if index == 0:
            return Reply(content="```python\nimport torch\n", finish_reason="length")
        return Reply(content=answer(PY_ONLY, "later"), delay_s=2.0)

    seen: list[tuple[str, int]] = []
    with FakeLLMServer(script) as server:
        provider = OpenAIChat(LLMSettings(base_url=server.url, model="fake-coder", api_key="k"))
        config = RunConfig(samples=2, concurrency=2, out_dir=tmp_path / "generations")
        events = lambda kind, c: seen.append((kind, c.sample))  # noqa: E731
        result = Loop(provider, database, settings, config, events=events).run(resolve_problem("relu"))
    first = next(s for kind, s in seen if kind == "answered")
    assert seen.index(("judged", first)) < seen.index(("answered", 1 - first)), seen
    assert [c.sample for c in result.candidates] == [0, 1]
    assert sorted(c.status for c in result.candidates) == ["cheat", "truncated"]


@pytest.mark.slow
def test_on_cuda_each_rounds_best_correct_kernel_is_profiled_once_and_its_metrics_reach_the_next_refine_prompt(
        tmp_path, database, settings, monkeypatch):
    """The loop's profiling step, wired: evaluator.profile is replaced (ncu needs a GPU) and the step is run as on
    CUDA; everything else is real. The round's correct kernel is profiled once per round (the same kernel again
    next round is not profiled again), and the next turn's refine prompt carries its kernel line. On CPU the step
    does nothing."""
    import pipeline.loop as loop_module
    from evaluator import KernelProfile, Profile

    profiled = []

    def fake_profile(job, eval_settings, median_ms):
        profiled.append((job.sha256, eval_settings.device, median_ms))
        return Profile(kernels=[KernelProfile(name="relu_kernel(float *, long)", launches=1, ms=0.01, share=1.0,
                                              sm_pct=12.0, dram_pct=81.0)], calls=3)

    monkeypatch.setattr(loop_module, "profile", fake_profile)
    real_step = Loop._profile

    def as_on_cuda(self, *args):
        on_cpu, self.settings = self.settings, self.settings.model_copy(update={"device": "cuda"})
        try:
            return real_step(self, *args)
        finally:
            self.settings = on_cpu

    with FakeLLMServer(lambda body, i: Reply(content=answer(FIXED_RELU, f"draft {i}"))) as server:
        result = loop(server, database, settings, tmp_path, turns=2).run(resolve_problem("relu"))
        assert profiled == [] and "Nsight Compute" not in server.requests[1]["messages"][-1]["content"]  # CPU: none
        monkeypatch.setattr(Loop, "_profile", as_on_cuda)
        result = loop(server, database, settings, tmp_path, turns=3, temperature=0.5).run(resolve_problem("relu"))
        refine_prompts = [body["messages"][-1]["content"] for body in server.requests[3:]]
    first = result.candidates[0]
    assert first.status == "correct", first.verdict.evidence.cause
    assert profiled == [(first.verdict.solution_sha256, "cuda", first.verdict.candidate.median_ms)]  # rounds 1, 2: once
    assert result.profiles == {first.verdict.solution_sha256: "1 kernel(s) profiled"}
    assert all("- `relu_kernel(float *, long)` 100%: SM throughput 12% of peak, DRAM throughput 81%." in prompt
               for prompt in refine_prompts) and len(refine_prompts) == 2


def test_each_answer_joins_the_turns_one_batch_as_it_arrives(tmp_path, database, settings, monkeypatch):
    """The turn's answers go to ONE evaluator batch, opened for the problem, each the moment it arrives: an answer
    that arrives later but needs no compile gets its verdict before the earlier one still compiling."""
    import time

    from evaluator.parent import runner

    batches, times = [], {}
    real = runner.evaluate

    def counted(jobs, settings, on_stage=None):
        batches.append(type(jobs).__name__)
        return real(jobs, settings, on_stage)

    monkeypatch.setattr(runner, "evaluate", counted)
    kernel_free = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
    replies = [Reply(content=answer(FIXED_RELU, "a C++ relu")), Reply(content=answer(kernel_free, "torch"), delay_s=2)]
    with FakeLLMServer(lambda body, i: replies[i]) as server:
        run = Loop(OpenAIChat(LLMSettings(base_url=server.url, model="fake-coder", api_key="k")), database, settings,
                   RunConfig(out_dir=tmp_path / "generations", samples=2),
                   events=lambda kind, c: times.setdefault((kind, c.extraction.code == kernel_free), time.monotonic()))
        result = run.run(resolve_problem("relu"))
    assert batches == ["JobStream"]
    assert sorted(c.status for c in result.candidates) == ["cheat", "correct"]
    assert times[("answered", False)] < times[("answered", True)]  # the kernel arrived first ...
    assert times[("judged", True)] < times[("judged", False)]  # ... and was judged after the later answer


def test_judged_as_triton_the_loop_asks_for_triton_kernels_and_judges_the_answer(tmp_path, database, settings):
    """--backend triton: the prompt asks for @triton.jit kernels (its one-shot example is one) and the answer is
    judged as Triton (on CPU under Triton's interpreter)."""
    from pathlib import Path

    from evaluator.languages import Language

    kernel = (Path(__file__).parent / "candidates" / "triton" / "relu" / "honest.py").read_text()
    triton_settings = settings.model_copy(update={"language": Language.TRITON})
    with FakeLLMServer(lambda body, i: Reply(content=answer(kernel, "a Triton relu"))) as server:
        result = loop(server, database, triton_settings, tmp_path, samples=1).run(resolve_problem("relu"))
    prompt = server.requests[0]["messages"][1]["content"]
    assert "@triton.jit" in prompt and "load_inline" not in prompt
    (judged,) = result.candidates
    assert judged.verdict.status.value == "correct", judged.verdict.evidence.cause
    assert judged.verdict.evidence.language == "triton"
