"""The agent pipeline against a real local HTTP server speaking OpenAI's protocol, a real SQLite file and the
real evaluator (compile-heavy tests are marked slow; they still run in CI)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from fake_llm_server import COMPILER_ERROR_TEXT, FIXED_RELU, FakeLLMServer, Reply, repair_script
from kforge.cli_generate import generate
from pipeline.extract import ExtractionStatus, extract
from pipeline.llm import LLMError, LLMRequest, LLMSettings, OpenAIChat
from pipeline.loop import Loop, RunConfig
from pipeline.replay import SOLUTIONS, ReplayProvider, seed_index
from reference_problems import resolve_problem

SEEDS = Path(__file__).resolve().parents[1] / "recordings" / "seeds"
KEY = "sk-test-do-not-leak"
REQUEST = LLMRequest(problem="relu", messages=[{"role": "user", "content": "write a kernel"}])


@pytest.fixture(autouse=True)
def no_llm_env(monkeypatch):
    for name in ("KFORGE_LLM_BASE_URL", "KFORGE_LLM_MODEL", "KFORGE_LLM_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def client(server: FakeLLMServer, **kw) -> OpenAIChat:
    return OpenAIChat(LLMSettings(base_url=server.url, model="fake-coder", api_key=KEY, **kw))


def run_loop(provider, database, settings, tmp_path, problem="relu", **config):
    loop = Loop(provider, database, settings, RunConfig(out_dir=tmp_path / "generations", **config))
    return loop.run(resolve_problem(problem))


# -- the client ------------------------------------------------------------------------------------------------


def test_429_then_success_is_retried():
    with FakeLLMServer([Reply(status=429), Reply(content="the answer")]) as server:
        response = client(server, max_retries=2).complete(REQUEST)
    assert response.text == "the answer"
    assert len(server.requests) == 2
    assert response.usage.prompt_tokens == 3 and response.model == "fake-coder"
    assert server.headers[1]["authorization"] == f"Bearer {KEY}"
    assert server.headers[1]["x-stainless-retry-count"] == "1"


def test_persistent_5xx_gives_up_with_one_line_and_no_key():
    with FakeLLMServer([Reply(status=503)]) as server:
        with pytest.raises(LLMError) as caught:
            client(server, max_retries=1).complete(REQUEST)
    assert len(server.requests) == 2
    assert "HTTP 503" in str(caught.value) and KEY not in str(caught.value)
    assert KEY not in repr(LLMSettings(api_key=KEY))


def test_timeout():
    with FakeLLMServer([Reply(content="late", delay_s=1.5)]) as server:
        with pytest.raises(LLMError, match="Timeout"):
            client(server, timeout_s=0.3, max_retries=0).complete(REQUEST)


# -- extraction ------------------------------------------------------------------------------------------------


def test_extraction_strips_reasoning_and_takes_the_final_block():
    good = "class ModelNew:\n    pass\n"
    text = f"<think>\n```python\nclass Draft: pass\n```\n</think>\nfirst:\n```python\nx = 1\n```\nfinal:\n```python\n{good}```\n"
    assert extract(text).code == good and extract(text).ok
    bare = f"reasoning with a stray block\n```python\nclass ModelNew: 0\n```\n</think>\n```py\n{good}```"
    assert extract(bare).code == good
    assert extract(f"<think>still thinking\n```python\n{good}```").status is ExtractionStatus.TRUNCATED
    assert extract(f"```\n{good}```").code == good  # untagged fence when nothing is tagged python


def test_extraction_statuses():
    assert extract("```python\nclass Model:\n    pass\n```").status is ExtractionStatus.NO_MODEL_NEW
    assert extract("```python\nclass ModelNew(:\n    pass\n```").status is ExtractionStatus.SYNTAX_ERROR
    assert extract("I cannot help with that.").status is ExtractionStatus.NO_CODE
    assert extract("Let me think about tiling", finish_reason="length").status is ExtractionStatus.TRUNCATED
    unclosed = "```python\nclass ModelNew:\n    pass\n"
    assert extract(unclosed).status is ExtractionStatus.TRUNCATED
    assert extract(unclosed, finish_reason="stop").ok  # a forgotten fence on a finished answer is no cut


# -- the loop with a real server and a real db --------------------------------------------------------------------


def test_truncated_answers_are_not_compiled_and_the_cut_is_fed_back(tmp_path, database, settings):
    cut = "```python\nimport torch\nfrom torch.utils.cpp_extension import load_inline\nsrc = r\"\"\"\n#include <torch/extension.h>\n"
    shorter = "```python\nimport torch\nsrc = r\"\"\"\n"
    script = [Reply(content=text, finish_reason="length") for text in (cut, shorter, cut)]
    with FakeLLMServer(script) as server:
        result = run_loop(client(server), database, settings, tmp_path, turns=3)
    first, second, third = result.candidates
    assert first.extraction.status is ExtractionStatus.TRUNCATED
    assert first.status == "truncated" and first.verdict.evidence.stage == "parse"
    assert first.path.read_text() == cut.removeprefix("```python\n")  # kept for inspection
    assert not (tmp_path / "builds").exists()  # nothing compiled
    assert "cut off" in server.requests[1]["messages"][-1]["content"]
    gens = sorted(database.generations("relu"), key=lambda g: g.id)
    assert [g.extraction_status for g in gens] == ["truncated"] * 3
    assert [g.parent_generation_id for g in gens] == [None, gens[0].id, gens[1].id]
    # the latest failure is refined; an answer repeating earlier code does not become its own grandchild
    assert third.path == first.path and third.parent_sha256 == second.verdict.solution_sha256
    assert database.get_solution(second.verdict.solution_sha256).parent_sha256 == first.verdict.solution_sha256
    assert database.get_solution(first.verdict.solution_sha256).parent_sha256 is None
    assert [e.status for e in database.evaluations("relu")] == ["truncated"] * 2  # the same code is judged once


def test_no_code_answer_and_resume_from_cache(tmp_path, database, settings):
    with FakeLLMServer([Reply(content="Sorry, I can only describe the idea: fuse the loops.")]) as server:
        first = run_loop(client(server), database, settings, tmp_path, samples=2)
        again = run_loop(client(server), database, settings, tmp_path, samples=2)
    assert [c.status for c in first.candidates] == ["no_code", "no_code"]
    assert all(c.path is None and c.verdict is None for c in first.candidates)
    assert len(server.requests) == 2  # the second run was answered from the db: nothing paid twice
    assert [c.cached for c in again.candidates] == [True, True]
    assert [c.generation_id for c in again.candidates] == [c.generation_id for c in first.candidates]
    assert [g.extraction_status for g in database.generations("relu")] == ["no_code", "no_code"]


def test_replay_of_the_seeds_reproduces_the_seed_solutions(tmp_path):
    """Through the CLI: the final python block of each transcript, byte for byte (003 cut off), nothing compiled."""
    index = seed_index(SEEDS)
    assert sum(map(len, index.values())) == 5
    app = typer.Typer()
    app.command("generate")(generate)
    out = tmp_path / "generations"
    args = ["--problem", ",".join(index), "--samples", "2", "--replay", str(SEEDS), "--device", "cpu", "--size", "small",
            "--db", f"sqlite:///{tmp_path / 'kforge.db'}", "--out", str(out), "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = [ln for ln in map(json.loads, result.stdout.splitlines()) if ln["kind"] == "candidate"]
    for problem, transcripts in index.items():
        for sample, transcript in enumerate(transcripts):
            (line,) = [ln for ln in lines if ln["problem"] == problem and ln["sample"] == sample]
            expected = (SOLUTIONS / problem / f"seed_{transcript.stem}.py").read_bytes()
            assert Path(line["path"]).read_bytes() == expected, transcript.name
            assert line["status"] == ("truncated" if transcript.stem.startswith("003") else "skipped")
    assert not (tmp_path / "builds").exists()


def test_without_json_each_judged_answer_is_a_line_as_it_comes(tmp_path):
    """A reader (or a log, stdout piped) sees every verdict of the run, not only a progress bar's last word."""
    app = typer.Typer()
    app.command("generate")(generate)
    args = ["--problem", "conv1d,matmul_maxpool_sum_scale", "--samples", "2", "--replay", str(SEEDS), "--device", "cpu",
            "--size", "small", "--db", f"sqlite:///{tmp_path / 'kforge.db'}", "--out", str(tmp_path / "generations")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    said = re.findall(r"^kforge: (\w+) turn 0 sample (\d) \[[^\]]+\]: (\w+)  ([0-9a-f]{12})$", result.output, re.M)
    assert sorted((p, s, st) for p, s, st, _ in said) == [
        ("conv1d", "0", "skipped"), ("conv1d", "1", "skipped"), ("matmul_maxpool_sum_scale", "0", "truncated")], result.output


def test_replay_without_recordings_is_one_clear_error(tmp_path):
    with pytest.raises(LLMError, match="no recordings"):
        ReplayProvider(tmp_path)


@pytest.mark.parametrize(("args", "message"), [
    (["--problem", "no_such_problem"], "unknown problem 'no_such_problem'"),
    (["--problem", "relu"], "no model: pass --model or set KFORGE_LLM_MODEL"),
])
def test_cli_errors_are_one_line(tmp_path, args, message):
    app = typer.Typer()
    app.command("generate")(generate)
    result = CliRunner().invoke(app, [*args, "--device", "cpu", "--db", f"sqlite:///{tmp_path / 'k.db'}"])
    assert result.exit_code == 2
    assert result.output.strip().startswith("kforge: error: ") and message in result.output
    assert "Traceback" not in result.output


@pytest.mark.slow
def test_two_turn_repair_feeds_the_compiler_error_back(tmp_path, database, settings):
    with FakeLLMServer(repair_script) as server:
        result = run_loop(client(server), database, settings, tmp_path, turns=2)
    first, second = result.candidates
    assert len(server.requests) == 2
    feedback = server.requests[1]["messages"][-1]["content"]
    assert COMPILER_ERROR_TEXT in feedback and "total_elems" in feedback
    assert server.requests[1]["messages"][-2]["content"].startswith("```python\n")
    assert first.status == "compile_error" and second.status == "correct", second.verdict.evidence.cause
    assert second.path.read_text() == FIXED_RELU and second.verdict.speedup > 0
    # both turns stored and linked: generation -> parent generation, solution -> parent solution
    gen1, gen2 = sorted(database.generations("relu"), key=lambda g: g.id)
    assert (gen1.turn, gen2.turn) == (0, 1) and gen2.parent_generation_id == gen1.id
    assert gen2.prompt == server.requests[1]["messages"]
    solution = database.get_solution(gen2.solution_sha256)
    assert solution.parent_sha256 == gen1.solution_sha256 and solution.origin == "repair"
    assert {e.status for e in database.evaluations("relu")} == {"compile_error", "correct"}
    print(json.dumps(gen2.prompt + [{"role": "assistant", "content": gen2.response}], indent=1))
