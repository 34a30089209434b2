"""Prompts and feedback: every registered problem renders, and each kind of verdict says what failed."""

from __future__ import annotations

import jinja2
import pytest

from evaluator import Evidence, Mismatch, Status, TimingStats, Verdict
from prompts import Turn, chat_messages, format_tolerance, render_feedback, render_prompt
from prompts.render import ENV, render_system
from reference_problems import list_problems
from reference_problems.registry import PROBLEM_DIR

PROBLEMS = [p for p in list_problems() if p.path.parent == PROBLEM_DIR]  # not the user's imported ones


def make_verdict(status: Status, **evidence) -> Verdict:
    return Verdict(status=status, problem="relu", solution_sha256="ab" * 32, solution_path="/gen/relu/cand.py",
                   device="cpu", evidence=Evidence(**evidence))


def timing(ms: float) -> TimingStats:
    return TimingStats(median_ms=ms, mean_ms=ms, min_ms=ms, max_ms=ms, p20_ms=ms, p80_ms=ms, std_ms=0.0, cv=0.0,
                       reps=10, method="perf_counter")


@pytest.mark.parametrize("target", ["cuda", "cpu"])
@pytest.mark.parametrize("problem", PROBLEMS, ids=[p.name for p in PROBLEMS])
def test_every_problem_renders(problem, target):
    text = render_prompt(problem, target=target)
    assert problem.source().rstrip() in text
    assert f"correct within {format_tolerance(problem.meta.atol, problem.meta.rtol)} of the original" in text
    assert "Name the optimized architecture ModelNew" in text
    assert "torch.utils.cpp_extension.load_inline" in text
    assert ("cuda_sources=" in text) == (target == "cuda")
    assert ('extra_cflags=["-O3"]' in text) == (target == "cpu")


def test_the_triton_prompt_asks_for_triton_and_its_example_is_a_working_triton_candidate(tmp_path):
    """The one-shot example is judged like an answer: the language reader calls it Triton, and under Triton's
    interpreter it adds as the example's reference does."""
    import subprocess
    import sys

    from evaluator.languages import language_of

    text = render_prompt(PROBLEMS[0], target="triton")
    assert "@triton.jit" in text and "load_inline" not in text and "Triton kernels" in render_system("triton") + text
    example = text.split("```python\n")[2].split("```")[0]
    assert str(language_of(example)).endswith("triton")
    (tmp_path / "example.py").write_text(example)
    check = ("import torch, example\n"
             "a, b = torch.randn(3000), torch.randn(3000)\n"
             "assert torch.equal(example.ModelNew()(a, b), a + b)\n")
    run = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "TRITON_INTERPRET": "1"})
    assert run.returncode == 0, run.stderr[-2000:]


def test_small_size_names_the_overridden_constants():
    problem = next(p for p in PROBLEMS if p.meta.small)
    text = render_prompt(problem, target="cpu", size="small")
    assert "Do not hard-code tensor sizes" in text
    for key, value in problem.meta.small.items():
        assert f"{key} = {value}" in text


def test_tolerance_is_written_like_the_seeds():
    assert format_tolerance(1e-4, 1e-4) == "1e-4"
    assert format_tolerance(2.5e-3, 1e-2) == "an absolute tolerance of 2.5e-3 and a relative tolerance of 1e-2"


def test_strict_undefined_catches_missing_variables():
    with pytest.raises(jinja2.UndefinedError):
        ENV.get_template("prompt.j2").render(target="cpu")
    with pytest.raises(jinja2.UndefinedError):
        ENV.get_template("feedback.j2").render()


def test_compile_feedback_keeps_only_error_lines():
    noise = [f"[{i}/3] c++ -O3 -c main.cpp -o main.o" for i in range(40)]
    errors = [f"/tmp/builds/ab12/ext/main.cpp:{i}:5: error: 'x{i}' was not declared in this scope" for i in range(30)]
    log = "\n".join(noise + errors + ["ninja: build stopped: subcommand failed."])
    text = render_feedback(make_verdict(Status.COMPILE_ERROR, log_tail=log, cause="RuntimeError: Error building extension"), "")
    assert "main.cpp:0:5: error: 'x0' was not declared in this scope" in text
    assert "c++ -O3 -c main.cpp" not in text and "/tmp/builds" not in text  # private paths are dropped
    assert "'x25' was not declared" not in text  # trimmed to the first ~20 lines
    assert "Fix the problem" in text and "ModelNew" in text


def test_runtime_feedback_shows_the_traceback_tail_and_the_candidate_line():
    source = "\n".join(f"line_{i} = {i}" for i in range(1, 31))
    frames = "\n".join(f'  File "/lib/frame{i}.py", line {i}, in f' for i in range(40))
    log = f'Traceback (most recent call last):\n{frames}\n  File "/gen/relu/cand.py", line 17, in forward\nIndexError: boom'
    text = render_feedback(make_verdict(Status.RUNTIME_ERROR, log_tail=log, cause="IndexError: boom"), source)
    assert "IndexError: boom" in text and "frame39.py" in text
    assert "frame1.py" not in text
    assert "  17 | line_17 = 17" in text and "  15 | line_15 = 15" in text


def test_mismatch_feedback_says_where_and_how_much():
    mismatch = Mismatch(trial=1, max_abs_err=0.25, max_rel_err=0.5, worst_index=[3, 7], expected=0.5, got=0.75,
                        bad_fraction=0.125, reason="values differ beyond tolerance")
    text = render_feedback(make_verdict(Status.INCORRECT, mismatch=mismatch), "")
    for fragment in ("max abs error 0.25", "max rel error 0.5", "[3, 7]", "expected 0.5, got 0.75", "12.5%"):
        assert fragment in text


def test_leak_and_speed_feedback():
    leak = render_feedback(make_verdict(Status.LEAK, leaked_bytes={"host_rss": 33554432}), "")
    assert "host_rss +33554432 bytes" in leak
    fast = make_verdict(Status.CORRECT).model_copy(update={"candidate": timing(2.0), "reference": timing(1.0), "speedup": 0.5})
    text = render_feedback(fast, "")
    assert "speedup 0.5x" in text and "slower than the original" in text and "faster" in text


def test_truncated_feedback_points_at_the_cut():
    source = "import torch\nsrc = r'''\nint main() {"
    verdict = make_verdict(Status.TRUNCATED, stage="parse", cause="response cut off: unterminated string (line 2 of 3)")
    text = render_feedback(verdict, source)
    assert "cut off" in text and "   2 | src = r'''" in text and "short enough" in text


def test_chat_messages_alternate_code_and_feedback():
    problem = PROBLEMS[0]
    verdict = make_verdict(Status.COMPILE_ERROR, log_tail="main.cpp:1:1: error: expected ';'")
    messages = chat_messages(problem, [Turn(source="class ModelNew: pass\n", verdict=verdict)], target="cpu")
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[2]["content"] == "```python\nclass ModelNew: pass\n```"
    assert "expected ';'" in messages[3]["content"]
