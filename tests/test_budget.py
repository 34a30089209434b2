"""Cost ledger and budgets through `kforge generate`, against the scripted OpenAI server on 127.0.0.1 (which reports
the usage each test scripts) and a real SQLite file: a run stops exactly at its limit, the db holds its spend by run,
problem and model, and --resume continues it without paying again for the answers it already has."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from db import Database
from fake_llm_server import FakeLLMServer, Reply
from kforge.cli import app as kforge_app
from kforge.cli_generate import generate

PROMPT_TOKENS, COMPLETION_TOKENS = 100, 50
CALL_TOKENS = PROMPT_TOKENS + COMPLETION_TOKENS
PRICES = {"fake-coder": {"prompt": 10.0, "completion": 20.0}}  # USD per 1M tokens: 0.002 per call
CALL_USD = (PROMPT_TOKENS * 10.0 + COMPLETION_TOKENS * 20.0) / 1e6


def cut_answer(body: dict, index: int) -> Reply:
    """A distinct answer cut off mid-file per request: judged `truncated` without a compile, and a parent to refine."""
    code = f"```python\nimport torch\n# answer {index}\nsrc = r\"\"\"\n#include <torch/extension.h>\n"
    return Reply(content=code, finish_reason="length", prompt_tokens=PROMPT_TOKENS, completion_tokens=COMPLETION_TOKENS)


@pytest.fixture(autouse=True)
def no_llm_env(monkeypatch):
    for name in ("KFORGE_LLM_BASE_URL", "KFORGE_LLM_MODEL", "KFORGE_LLM_API_KEY", "KFORGE_LLM_PRICES", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def kforge(tmp_path):
    """`kforge generate ARGS` on this test's db, against a server; returns (exit code, the candidates' JSON lines,
    stderr). Each output's last line, its summary, is kept in `run.summaries`."""
    app = typer.Typer()
    app.command("generate")(generate)
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES))
    db_url = f"sqlite:///{tmp_path / 'kforge.db'}"

    def run(server: FakeLLMServer, *args: str, resume: int | None = None) -> tuple[int, list[dict], str]:
        common = ["--db", db_url, "--model", "fake-coder", "--base-url", server.url, "--prices", str(prices), "--json"]
        first = ["--resume", str(resume)] if resume else ["--problem", "relu", "--device", "cpu", "--size", "small",
                                                           "--out", str(tmp_path / "generations")]
        result = CliRunner().invoke(app, [*first, *common, *args])
        *lines, summary = [json.loads(ln) for ln in result.stdout.splitlines()] or [None]
        run.summaries.append(summary)
        assert all(ln["kind"] == "candidate" for ln in lines)
        return result.exit_code, lines, result.stderr

    run.db_url, run.summaries = db_url, []
    return run


def test_token_budget_stops_exactly_and_resume_continues_without_paying_twice(kforge):
    with FakeLLMServer(cut_answer) as server:
        code, lines, stderr = kforge(server, "--samples", "2", "--turns", "3", "--concurrency", "1",
                                     "--budget-tokens", str(3 * CALL_TOKENS))
        assert code == 0, stderr
        assert len(server.requests) == 3  # t0 s0, t0 s1, t1 s0: the fourth call would pass the limit
        assert [(ln["turn"], ln["sample"]) for ln in lines] == [(0, 0), (0, 1), (1, 0)]
        run_id = lines[0]["run_id"]
        assert f"run {run_id} stopped: max_tokens reached: 450 of 450 tokens; continue with --resume {run_id}" in stderr
        with Database(kforge.db_url) as db:
            run = db.get_run(run_id)
            assert (run.status, run.calls, run.prompt_tokens + run.completion_tokens) == ("stopped", 3, 3 * CALL_TOKENS)
            assert run.cost_usd == pytest.approx(3 * CALL_USD) and run.wall_s > 0

        code, lines, stderr = kforge(server, "--budget-tokens", str(6 * CALL_TOKENS), resume=run_id)
        assert code == 0, stderr
        assert len(server.requests) == 6  # only the three calls the first session never made were paid
        assert sorted((ln["turn"], ln["sample"], ln["cached"], ln["taken_back"]) for ln in lines) == [
            (0, 0, True, True), (0, 1, True, True), (1, 0, True, True), (1, 1, False, False), (2, 0, False, False),
            (2, 1, False, False)]  # what the first command printed is marked: no answer shows twice unmarked (the
        # replayed answers are judged side by side, so they print in the order their verdicts come)
        assert f"run {run_id} finished" in stderr
    stopped, finished = kforge.summaries
    assert (stopped["kind"], stopped["run_id"], stopped["status"]) == ("summary", run_id, "stopped")
    assert stopped["stop_reason"] == "max_tokens reached: 450 of 450 tokens"
    assert (finished["status"], finished["stop_reason"]) == ("finished", None)
    (spent,) = finished["spend"]
    assert (spent["problem"], spent["model"], spent["calls"], spent["unpriced"]) == ("relu", "fake-coder", 6, 0)
    assert spent["cost_usd"] == pytest.approx(6 * CALL_USD)
    best = finished["best"]["relu"]
    assert best["status"] == "truncated" and (best["turn"], best["sample"]) in {(ln["turn"], ln["sample"]) for ln in lines}
    with Database(kforge.db_url) as db:
        run = db.get_run(run_id)
        assert (run.status, run.calls, run.settings["config"]["budget"]["max_tokens"]) == ("finished", 6, 6 * CALL_TOKENS)
        gens = db.generations("relu")
        assert len(gens) == 6 and {g.run_id for g in gens} == {run_id}
        assert sorted((g.turn, g.sample) for g in gens) == [(t, s) for t in range(3) for s in range(2)]
        (by_model,) = db.spend(by=("model",), run_id=run_id)
        assert (by_model.model, by_model.calls, by_model.prompt_tokens, by_model.completion_tokens) == (
            "fake-coder", 6, 6 * PROMPT_TOKENS, 6 * COMPLETION_TOKENS)
        assert by_model.cost_usd == pytest.approx(6 * CALL_USD) and by_model.unpriced == 0
        (by_problem,) = db.spend(by=("run_id", "problem"))
        assert (by_problem.run_id, by_problem.problem, by_problem.calls) == (run_id, "relu", 6)
        last = max(gens, key=lambda g: g.id)
    shown = CliRunner().invoke(kforge_app, ["show", last.solution_sha256[:12], "--db", kforge.db_url], env={"COLUMNS": "80"})
    assert shown.exit_code == 0, shown.output
    assert f"call #{last.id} by fake-coder: 100 + 50 tokens, $0.0020\n  turn 2, sample 1, refine\n" in shown.stdout
    assert f"run {run_id} finished: 6 calls, 900 tokens, $0.0120, " in shown.stdout


def test_candidate_budget_is_exact_with_calls_in_flight(kforge):
    with FakeLLMServer(cut_answer) as server:
        code, lines, stderr = kforge(server, "--samples", "5", "--concurrency", "4", "--budget-candidates", "3")
    assert code == 0, stderr
    assert len(server.requests) == 3 and len(lines) == 3
    assert "max_candidates reached: 3 of 3 candidates" in stderr


def test_dollar_budget_stops_at_the_first_call_that_reaches_it(kforge):
    with FakeLLMServer(cut_answer) as server:
        code, lines, stderr = kforge(server, "--samples", "5", "--concurrency", "1",
                                     "--budget-usd", str(2.5 * CALL_USD))
    assert code == 0, stderr
    assert len(server.requests) == 3  # 2 calls leave it under the limit, the third carries it over: no fourth
    assert [ln["cost_usd"] for ln in lines] == pytest.approx([CALL_USD] * 3)
    assert "max_cost_usd reached" in stderr


def test_wall_budget_lets_no_call_start_after_it(kforge):
    """Each answer takes 1.5 s and the budget is 4 s: every call starts within the 4 s after the run began, the run
    stops before its 8 samples and its recorded wall time has reached the limit (how many calls fit depends on the
    machine's speed, not what is checked)."""
    def slow(body: dict, index: int) -> Reply:
        return cut_answer(body, index).model_copy(update={"delay_s": 1.5})

    with FakeLLMServer(slow) as server:
        code, lines, stderr = kforge(server, "--samples", "8", "--concurrency", "1", "--budget-seconds", "4")
    assert code == 0, stderr
    assert "max_wall_s reached" in stderr
    with Database(kforge.db_url) as db:
        (run,) = [db.get_run(lines[0]["run_id"])]
    assert 1 <= len(server.requests) < 8 and run.wall_s >= 4 and run.status == "stopped"
    assert max(server.arrivals) < run.created_at.timestamp() + 4 + 0.5  # admitted before 4 s; 0.5 s for the HTTP hop


@pytest.mark.parametrize(("args", "message"), [
    (["--resume", "7"], "no run 7 in"),
    (["--resume", "1", "--problem", "relu"], "--resume runs the stored run's problems"),
    (["--problem", "relu", "--budget-usd", "1", "--prices", "/nonexistent.json"], "price file /nonexistent.json"),
    (["--problem", "relu", "--islands", "2", "--contrast", "0.5"], "contrast 0.5: a pair must be more than 1x apart"),
])
def test_budget_and_resume_errors_are_one_line(tmp_path, args, message):
    app = typer.Typer()
    app.command("generate")(generate)
    result = CliRunner().invoke(app, [*args, "--model", "m", "--device", "cpu", "--db", f"sqlite:///{tmp_path / 'k.db'}"])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines()[-1].startswith("kforge: error: ") and message in result.stderr


def test_dollar_budget_without_a_price_is_refused(tmp_path):
    app = typer.Typer()
    app.command("generate")(generate)
    result = CliRunner().invoke(app, ["--problem", "relu", "--model", "m", "--budget-usd", "1", "--device", "cpu",
                                      "--db", f"sqlite:///{tmp_path / 'k.db'}"])
    assert result.exit_code == 2 and "--budget-usd needs a price for model 'm'" in result.stderr
    assert not (tmp_path / "k.db").exists()  # refused before a database was made
