"""Prompts for Triton authors: the first prompt says where the kernels run, the feedback speaks of Triton's compile
and interpreter, and (judged for real, against the scripted server on 127.0.0.1) a Triton answer's failure reaches
the next turn's prompt, as docs/examples/triton_turn2_prompt.md shows it."""

from __future__ import annotations

import pytest

from evaluator import Evidence, Status, TimingStats, Verdict
from evaluator.languages import Language
from fake_llm_server import TRITON_BROKEN_RELU, FakeLLMServer, Reply, answer
from pipeline.llm import LLMSettings, OpenAIChat
from pipeline.loop import Loop, RunConfig
from prompts import render_feedback, render_prompt
from reference_problems import resolve_problem


def correct(language: Language | None, device: str) -> Verdict:
    ms = TimingStats(median_ms=2.0, mean_ms=2.0, min_ms=2.0, max_ms=2.0, p20_ms=2.0, p80_ms=2.0, std_ms=0.0, cv=0.0,
                     reps=10, method="perf_counter")
    return Verdict(status=Status.CORRECT, problem="relu", solution_sha256="ab" * 32, device=device, candidate=ms,
                   reference=ms, evidence=Evidence(language=language))


def test_the_first_prompt_says_where_triton_kernels_run_and_names_no_cxx_tooling():
    text = render_prompt(resolve_problem("relu"), target="triton", size="small")
    assert "Triton's interpreter runs your kernels" in text and "device=x.device" in text
    assert not any(word in text for word in ("load_inline", "nvcc", "cpp_extension", "cuda_sources"))


def test_an_interpreted_correct_kernel_is_not_told_its_interpreter_times():
    interpreted = render_feedback(correct(Language.TRITON, "cpu"), "")
    assert "ran under Triton's interpreter" in interpreted and "no speedup was measured" in interpreted
    assert "Candidate median" not in interpreted
    on_gpu = render_feedback(correct(Language.TRITON, "cuda"), "")
    assert "Candidate median 2 ms" in on_gpu and "interpreter" not in on_gpu


def test_a_triton_answer_that_fails_the_gpu_compile_is_shown_that_error_in_turn_two(tmp_path, database, settings):
    """Turn 1: a helper without @triton.jit (right under the interpreter, rejected by the compile for a GPU target);
    turn 2's prompt carries the Triton error with the answer it refines. Turn 2's own answer is cut off, so only
    turn 1's is judged."""
    pytest.importorskip("triton", reason="Triton candidates need the triton package (the dev extra installs it)")
    replies = [Reply(content=answer(TRITON_BROKEN_RELU, "a Triton relu")),
               Reply(content="```python\nimport torch\n", finish_reason="length")]
    triton_settings = settings.model_copy(update={"language": Language.TRITON})
    with FakeLLMServer(lambda body, i: replies[i]) as server:
        provider = OpenAIChat(LLMSettings(base_url=server.url, model="fake-coder", api_key="k"))
        config = RunConfig(turns=2, out_dir=tmp_path / "generations")
        result = Loop(provider, database, triton_settings, config).run(resolve_problem("relu"))
    first = result.candidates[0]
    assert first.status == "compile_error", first.verdict.evidence
    assistant, user = server.requests[1]["messages"][-2:]
    assert "def clamp_negative(x):" in assistant["content"]
    feedback = user["content"]
    assert "compile_error (Triton kernel relu_kernel does not compile for a GPU (sm_90)" in feedback
    assert "Triton could not compile a kernel for the GPU. Its error:" in feedback
    assert "Unsupported function referenced: <function clamp_negative>" in feedback and " at 0x" not in feedback
    assert "The build failed" not in feedback and "load_inline" not in feedback
