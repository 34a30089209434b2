"""`kforge export --trace`: after a `kforge generate` run against the scripted server on 127.0.0.1, one JSON line per
stored LLM call, consistent with the db (ids, parents, island, prompt kind, tokens, verdict), one per answer a later
run reused, and bad input is one line."""

from __future__ import annotations

import json
from datetime import datetime

import typer
from typer.testing import CliRunner

from db import Database
from fake_llm_server import FakeLLMServer, Reply
from kforge.cli import app
from kforge.cli_generate import generate
from kforge.cli_report import register

register()  # export, as main() registers it


def cut(body: dict, index: int) -> Reply:
    return Reply(content=f"```python\nimport torch\n# {index}\nsrc = r\"\"\"\n", finish_reason="length",
                 prompt_tokens=10 + index, completion_tokens=index)


def generate_json(server: FakeLLMServer, url: str, tmp_path, *options: str) -> list[dict]:
    """`kforge generate --json` of relu on CPU against the server: its lines."""
    gen_app = typer.Typer()
    gen_app.command("generate")(generate)
    run = CliRunner().invoke(gen_app, ["--problem", "relu", "--model", "fake-coder", "--base-url", server.url,
                                       "--device", "cpu", "--db", url, "--out", str(tmp_path / "out"), "--json",
                                       *options])
    assert run.exit_code == 0, run.output
    return [json.loads(line) for line in run.stdout.splitlines()]


def test_trace_has_one_line_per_call_consistent_with_the_db(tmp_path, monkeypatch):
    monkeypatch.delenv("KFORGE_LLM_PRICES", raising=False)
    url = f"sqlite:///{tmp_path / 'k.db'}"
    with FakeLLMServer(cut) as server:
        generate_json(server, url, tmp_path, "--samples", "2", "--turns", "2", "--islands", "2")
    trace_file = tmp_path / "trace.jsonl"
    res = CliRunner().invoke(app, ["export", "--trace", str(trace_file), "--db", url])
    assert res.exit_code == 0, res.output
    assert "exported 4 generations" in res.stderr
    lines = [json.loads(line) for line in trace_file.read_text().splitlines()]
    with Database(url) as db:
        gens = sorted(db.generations(), key=lambda g: g.id)
        verdicts = {e.solution_sha256: e for e in db.evaluations()}
    assert [ln["generation_id"] for ln in lines] == [g.id for g in gens]
    for line, g in zip(lines, gens):
        assert (line["run_id"], line["turn"], line["sample"], line["island"], line["prompt_kind"]) == (
            g.run_id, g.turn, g.sample, g.island, g.prompt_kind)
        assert (line["prompt_tokens"], line["completion_tokens"]) == (g.prompt_tokens, g.completion_tokens)
        assert line["parent_generation_id"] == g.parent_generation_id and line["solution_sha256"] == g.solution_sha256
        assert (line["status"], line["speedup"]) == (verdicts[g.solution_sha256].status, None)
    by_id = {ln["generation_id"]: ln for ln in lines}
    refines = sorted((ln for ln in lines if ln["turn"] == 1), key=lambda ln: ln["sample"])  # calls run concurrently
    assert [ln["prompt_kind"] for ln in refines] == ["refine", "refine"] and [ln["island"] for ln in refines] == [0, 1]
    assert all(ln["parent_sha256"] == by_id[ln["parent_generation_id"]]["solution_sha256"] for ln in refines)
    assert sorted(ln["prompt_tokens"] for ln in lines) == [10, 11, 12, 13] and {ln["status"] for ln in lines} == {"truncated"}
    assert not any(ln["cached"] or ln["cached_from_run_id"] for ln in lines)


def test_a_reused_answer_is_a_cached_line_of_the_run_that_reused_it(tmp_path, monkeypatch):
    """A second run asking what the first asked is given the stored answers: each call shows once, cached false,
    and each reuse is a line of the second run, after the calls, cached true, naming the call it reused, costing
    nothing."""
    monkeypatch.delenv("KFORGE_LLM_PRICES", raising=False)
    url = f"sqlite:///{tmp_path / 'k.db'}"
    with FakeLLMServer(cut) as server:
        first, second = (generate_json(server, url, tmp_path, "--samples", "2") for _ in range(2))
    assert len(server.requests) == 2
    (paid, paid_run), (given, given_run) = (([ln for ln in run if ln["kind"] == "candidate"], run[-1]["run_id"])
                                            for run in (first, second))
    assert not any(c["cached"] for c in paid) and all(c["cached"] for c in given)
    res = CliRunner().invoke(app, ["export", "--trace", "-", "--db", url])
    assert res.exit_code == 0, res.output
    assert "exported 2 generations, 2 reuses" in res.stderr
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert [ln["cached"] for ln in lines] == [False, False, True, True]
    calls, reuses = lines[:2], lines[2:]
    assert {ln["generation_id"] for ln in calls} == {c["generation_id"] for c in paid} == {
        c["generation_id"] for c in given} == {ln["generation_id"] for ln in reuses}
    assert {(ln["run_id"], ln["cached_from_run_id"]) for ln in calls} == {(paid_run, None)}
    assert {(ln["run_id"], ln["cached_from_run_id"]) for ln in reuses} == {(given_run, paid_run)}
    assert given_run != paid_run
    by_id = {ln["generation_id"]: ln for ln in calls}
    last_paid = max(datetime.fromisoformat(ln["created_at"]) for ln in calls)
    for reuse in reuses:
        call = by_id[reuse["generation_id"]]
        assert (reuse["prompt_tokens"], reuse["completion_tokens"], reuse["cost_usd"]) == (0, 0, 0.0) != (
            call["prompt_tokens"], call["completion_tokens"], call["cost_usd"])
        assert (reuse["sample"], reuse["solution_sha256"], reuse["status"]) == (
            call["sample"], call["solution_sha256"], call["status"])
        assert datetime.fromisoformat(reuse["created_at"]) > last_paid


def test_export_needs_exactly_one_target(tmp_path):
    res = CliRunner().invoke(app, ["export", "--jsonl", "a", "--trace", "b", "--db", f"sqlite:///{tmp_path / 'k.db'}"])
    assert res.exit_code == 2 and res.stderr.strip() == "kforge: error: give one of --jsonl FILE or --trace FILE"


def test_trace_names_cells_of_correct_answers_and_the_twin_of_a_duplicate(tmp_path):
    """Rows as the loop stores them: a correct answer gets its cell by its run's archive edges; a near-duplicate
    (no evaluation of its own) shows its twin's verdict and names it."""
    url = f"sqlite:///{tmp_path / 'k.db'}"
    source = 'src = r"""\n__shared__ float s[8];\n"""\nclass ModelNew: pass\n'
    with Database(url) as db:
        db.upsert_problem("relu", 1, "p", "h")
        run_id = db.start_run({"config": {"archive": {"islands": 2, "speedup_edges": [1.0, 2.0]}}})
        for sha in ("a" * 64, "b" * 64):
            db.upsert_solution(sha, "relu", source + ("# twin\n" if sha[0] == "b" else ""), origin="generated",
                               normalized_sha256="n" * 64)
            db.add_generation(problem="relu", solution_sha256=sha, request_hash=sha, provider="openai", model="m",
                              prompt=[], response="", run_id=run_id, island=1, sample=int(sha[0] == "b"))
        db.add_evaluation("a" * 64, status="correct", device="cpu", device_name="cpu-x", speedup=2.5)
    res = CliRunner().invoke(app, ["export", "--trace", "-", "--db", url])
    assert res.exit_code == 0, res.output
    first, twin = [json.loads(line) for line in res.stdout.splitlines()]
    assert (first["status"], first["speedup"], first["cell"], first["duplicate_of"]) == ("correct", 2.5, ">=2|shared_memory", None)
    assert (twin["status"], twin["speedup"], twin["cell"], twin["duplicate_of"]) == ("correct", 2.5, ">=2|shared_memory", "a" * 64)
