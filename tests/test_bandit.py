"""Model choice by value (pipeline/bandit.py): the choice rule alone, then two models behind the scripted OpenAI server
on 127.0.0.1 — "fast-cheap" answers a correct kernel with few tokens, "slow" a cut-off one with many — where the
bandit moves the requests to "fast-cheap", a resumed run asks the same model for each slot as an uninterrupted one,
and every stored call names the model that answered it."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from db import Database
from evaluator import EvalSettings
from fake_llm_server import FIXED_RELU, FakeLLMServer, Reply, answer
from kforge.cli_generate import generate
from pipeline.bandit import Arm, Bandit, BanditConfig, Tally, choose, improvement, slot_rng, values
from pipeline.budget import Budget, Meter, Spend
from pipeline.ledger import PriceTable, Usage
from pipeline.llm import LLMSettings, OpenAIChat
from pipeline.loop import Loop, RunConfig
from reference_problems import resolve_problem

PRICES = {"fast-cheap": {"prompt": 1.0, "completion": 2.0}, "slow": {"prompt": 10.0, "completion": 30.0}}
TOKENS = {"fast-cheap": (100, 50), "slow": (100, 2000)}  # prompt, completion tokens per answer


class Named:
    """A provider stand-in for the pure tests: only its name and model are read."""

    name = "fake"

    def __init__(self, model: str) -> None:
        self.model = model


def bandit(*tallies: Tally, **config) -> Bandit:
    b = Bandit([Arm(Named(f"m{i}"), None) for i in range(len(tallies))], BanditConfig(**config))
    b.tallies = list(tallies)
    return b


def test_reward_is_correct_speedup_gained_over_the_baseline():
    assert improvement(1.5, None) == 1.5  # nothing correct known: a correct answer earns its whole speedup
    assert improvement(1.5, 1.2) == pytest.approx(0.3)
    assert improvement(1.0, 1.2) == 0.0  # slower than the best known: no reward, never a penalty
    assert improvement(None, 1.2) == improvement(None, None) == 0.0  # not correct


def test_value_is_reward_per_usd_when_all_is_priced_else_per_token():
    a = Tally(answers=1, reward=1.0, tokens=100, cost_usd=0.01)
    b = Tally(answers=1, reward=1.0, tokens=1000, cost_usd=0.001)
    assert values([a, b]) == pytest.approx([100.0, 1000.0])  # USD: b is ten times cheaper
    b.unpriced = 1
    assert values([a, b]) == pytest.approx([0.01, 0.001])  # one unpriced answer: tokens for all, a is cheaper


def test_each_arm_is_tried_before_value_decides_counting_the_turn_so_far():
    b = bandit(Tally(), Tally(), Tally(), warmup=1)
    assert b.assign("relu", 0, [0, 1, 2]) == [0, 1, 2]
    tried = [Tally(answers=1, reward=1.0, tokens=10, unpriced=1), Tally(answers=1, tokens=10, unpriced=1), Tally()]
    assert bandit(*tried, warmup=1, epsilon=0).assign("relu", 1, [0, 1, 2, 3]) == [2, 0, 0, 0]  # untried, then value


def test_greedy_takes_most_improvement_per_cost_not_most_improvement():
    cheap = Tally(answers=2, reward=1.0, tokens=100, unpriced=2)  # 0.01 per token
    rich = Tally(answers=2, reward=5.0, tokens=1000, unpriced=2)  # more reward, 0.005 per token
    assert bandit(rich, cheap, epsilon=0).assign("relu", 3, list(range(20))) == [1] * 20
    spread = bandit(rich, cheap, epsilon=1).assign("relu", 3, list(range(200)))
    assert 70 < spread.count(0) < 130  # epsilon 1: uniform


def test_draws_are_fixed_by_seed_and_slot_not_by_call_order():
    tallies = [Tally(answers=1, tokens=10), Tally(answers=1, tokens=10)]  # a tie: every greedy choice is a draw
    config = BanditConfig(seed=3)
    first = [choose(tallies, [0, 0], config, slot_rng(config, "relu", 2, s)) for s in range(8)]
    assert bandit(*tallies, seed=3).assign("relu", 2, list(range(8))) == first
    assert bandit(*tallies, seed=3).assign("relu", 2, [7])[0] == first[7]  # a slot alone draws what it drew among all
    assert len({tuple(bandit(*tallies, seed=s).assign("relu", 2, list(range(8)))) for s in range(4)}) > 1


def test_arms_are_every_model_at_every_temperature_and_one_arm_draws_nothing():
    models = [Named("a"), Named("b")]
    arms = Bandit.over(models, 0.7, BanditConfig(temperatures=[0.2, 1.0])).arms
    assert [(a.provider.model, a.temperature) for a in arms] == [("a", 0.2), ("a", 1.0), ("b", 0.2), ("b", 1.0)]
    single = Bandit.over(models[:1], 0.7, BanditConfig(epsilon=1))
    assert [(a.provider.model, a.temperature) for a in single.arms] == [("a", 0.7)]
    assert not single.learning and single.assign("relu", 1, [0, 1, 2]) == [0, 0, 0]
    single.tell(0, Usage(prompt_tokens=3, completion_tokens=4), None, 0.0)
    assert single.tallies[0] == Tally(answers=1, tokens=7, unpriced=1)


# -- end to end: the scripted server, the real evaluator (one compile) ---------------------------------------------


def by_model(body: dict, index: int) -> Reply:
    """fast-cheap: the correct relu kernel (always the same code: compiled and judged once); slow: cut off."""
    prompt, completion = TOKENS[body["model"]]
    if body["model"] == "fast-cheap":
        return Reply(content=answer(FIXED_RELU, f"answer {index}"), prompt_tokens=prompt, completion_tokens=completion)
    return Reply(content=f"```python\nimport torch\n# slow answer {index}\nsrc = r\"\"\"\n", finish_reason="length",
                 prompt_tokens=prompt, completion_tokens=completion)


SAMPLES, TURNS = 4, 5


def run_once(server: FakeLLMServer, database: Database, settings: EvalSettings, tmp_path, run_id: int,
             budget: Budget, spent: Spend | None = None) -> dict[tuple[int, int], str]:
    """One session of run run_id; {(turn, sample): model} of what it drew."""
    llm = LLMSettings(base_url=server.url, api_key="k", prices=PriceTable.model_validate(PRICES))
    providers = [OpenAIChat(llm.model_copy(update={"model": m})) for m in ("slow", "fast-cheap")]  # slow listed first
    config = RunConfig(samples=SAMPLES, turns=TURNS, concurrency=2, out_dir=tmp_path / "generations", budget=budget)
    loop = Loop(providers, database, settings, config, run_id=run_id, meter=Meter(budget, spent))
    result = loop.run(resolve_problem("relu"))
    assert not result.errors, result.errors
    return {(c.turn, c.sample): c.model for c in result.candidates}


@pytest.mark.slow
def test_the_bandit_moves_requests_to_the_model_that_improves_most_per_cost(tmp_path, database, settings):
    """A run stopped after two turns and resumed, then the same run whole in a db of its own (in this one its
    kernels would be known before it began, and earn nothing)."""
    with FakeLLMServer(by_model) as server, Database(f"sqlite:///{tmp_path / 'whole.db'}") as other:
        run_id = database.start_run({})
        first = run_once(server, database, settings, tmp_path, run_id, Budget(max_candidates=2 * SAMPLES))
        resumed = run_once(server, database, settings, tmp_path, run_id, Budget(), Spend(candidates=len(first)))
        asked = [body["model"] for body in server.requests]
        whole = run_once(server, other, settings, tmp_path, other.start_run({}), Budget())
    assert len(first) == 2 * SAMPLES and resumed == whole  # the tallies rebuilt: the same model asked per slot
    assert sorted(whole[0, s] for s in range(2)) == ["fast-cheap", "slow"]  # warm-up: each model once
    later = [whole[t, s] for t in range(1, TURNS) for s in range(SAMPLES)]
    assert later.count("fast-cheap") >= len(later) - 2, whole  # epsilon 0.1 leaves a rare exploring draw
    assert len(asked) == SAMPLES * TURNS  # resumed, the run bought only what it had not
    gens = database.generations("relu")
    assert len(gens) == len(asked) and sorted(g.model for g in gens) == sorted(asked)
    for g in gens:  # each stored call names the model that answered it: its own usage and its own kind of answer
        assert (g.prompt_tokens, g.completion_tokens) == TOKENS[g.model]
        assert g.extraction_status == ("ok" if g.model == "fast-cheap" else "truncated")
        price = PRICES[g.model]
        assert g.cost_usd == pytest.approx((100 * price["prompt"] + TOKENS[g.model][1] * price["completion"]) / 1e6)
    spend = {row.model: row for row in database.spend(by=("model",))}
    assert {m: spend[m].calls for m in spend} == {m: asked.count(m) for m in set(asked)}
    best = max(database.evaluations("relu"), key=lambda e: e.speedup or 0)
    assert best.status == "correct" and database.get_solution(best.solution_sha256).model == "fast-cheap"


COPY_PRICES = {"good": {"prompt": 1.0, "completion": 2.0}, "copier": {"prompt": 3.0, "completion": 6.0}}


def good_or_copy(body: dict, index: int) -> Reply:
    """good: the correct relu kernel, always the same code; copier, at three times the price: that kernel again with
    a comment of its own (a near-duplicate, never judged itself)."""
    code = FIXED_RELU if body["model"] == "good" else FIXED_RELU.replace("class ModelNew", "# mine\nclass ModelNew")
    return Reply(content=answer(code, f"answer {index}"), prompt_tokens=100, completion_tokens=50)


@pytest.mark.slow
def test_an_arm_that_resends_another_arms_kernel_earns_nothing(tmp_path, database, settings):
    """The copier's draft repeats the good arm's draft of the same turn, and later answers gain nothing over the
    best known: before, the copier's draft was credited the whole gain while the good arm's repeats diluted its
    average, and the copier took every request of a later turn."""
    with FakeLLMServer(good_or_copy) as server:
        llm = LLMSettings(base_url=server.url, api_key="k", prices=PriceTable.model_validate(COPY_PRICES))
        providers = [OpenAIChat(llm.model_copy(update={"model": m})) for m in ("good", "copier")]
        config = RunConfig(samples=2, turns=4, concurrency=1, out_dir=tmp_path / "generations",
                           bandit=BanditConfig(epsilon=0))
        loop = Loop(providers, database, settings, config, run_id=database.start_run({}))
        result = loop.run(resolve_problem("relu"))
    drafts = {c.model: c for c in result.candidates if c.turn == 0}
    assert drafts["good"].verdict.status.value == "correct" and drafts["copier"].duplicate_of
    assert [c.model for c in result.candidates if c.turn > 0] == ["good"] * 6  # the copier: its warm-up only
    assert loop.bandit.tallies[1].reward == 0.0 and loop.bandit.tallies[1].cost_usd > 0  # it paid for nothing
    best = result.best()  # the evaluated original's file, not the near-duplicate's of the same verdict
    assert best.duplicate_of is None and best.path.stem == best.verdict.solution_sha256


# -- the CLI: several --model, --temperatures, stored with the run ------------------------------------------------


def echo(body: dict, index: int) -> Reply:
    """A cut-off answer that names the model and temperature it was asked with."""
    return Reply(content=f"```python\n# {body['model']} at {body.get('temperature')} ({index})\nsrc = r\"\"\"\n",
                 finish_reason="length", prompt_tokens=10, completion_tokens=5)


def test_cli_takes_several_models_and_temperatures_and_resume_keeps_them(tmp_path, monkeypatch):
    for name in ("KFORGE_LLM_BASE_URL", "KFORGE_LLM_MODEL", "KFORGE_LLM_API_KEY", "KFORGE_LLM_PRICES"):
        monkeypatch.delenv(name, raising=False)
    app = typer.Typer()
    app.command("generate")(generate)
    db_url = f"sqlite:///{tmp_path / 'kforge.db'}"
    with FakeLLMServer(echo) as server:
        common = ["--db", db_url, "--base-url", server.url, "--json"]
        first = CliRunner().invoke(app, ["--problem", "relu", "--device", "cpu", "--size", "small", "--out",
                                         str(tmp_path / "gen"), "--model", "a", "--model", "b", "--temperatures",
                                         "0.2,0.9", "--samples", "4", "--turns", "2", "--budget-candidates", "4",
                                         *common])
        assert first.exit_code == 0, first.output
        run_id = json.loads(first.stdout.splitlines()[0])["run_id"]
        again = CliRunner().invoke(app, ["--resume", str(run_id), "--budget-candidates", "8", *common])
        assert again.exit_code == 0, again.output
        arms = [(body["model"], body["temperature"]) for body in server.requests]
    assert sorted(arms[:4]) == [("a", 0.2), ("a", 0.9), ("b", 0.2), ("b", 0.9)]  # warm-up: every arm once
    assert len(arms) == 8 and set(arms) <= {("a", 0.2), ("a", 0.9), ("b", 0.2), ("b", 0.9)}
    lines = [ln for ln in map(json.loads, again.stdout.splitlines()) if ln["kind"] == "candidate"]
    with Database(db_url) as db:
        gens = {g.id: g for g in db.generations("relu")}
        assert db.get_run(run_id).settings["models"] == ["b"]
    assert len(gens) == 8 and all(f"# {g.model} at " in g.response for g in gens.values())
    assert all(ln["model"] == gens[ln["generation_id"]].model for ln in lines)


def test_a_model_whose_server_fails_counts_answers_that_earned_nothing(tmp_path, database, settings):
    """Without this, a failing arm would stay 'untried' and be asked first in every turn's warm-up."""
    def down_or_cut(body: dict, index: int) -> Reply:
        return Reply(status=500, content="down") if body["model"] == "down" else echo(body, index)

    with FakeLLMServer(down_or_cut) as server:
        llm = LLMSettings(base_url=server.url, api_key="k", max_retries=0)
        providers = [OpenAIChat(llm.model_copy(update={"model": m})) for m in ("down", "up")]
        loop = Loop(providers, database, settings, RunConfig(samples=2, turns=2, out_dir=tmp_path / "out"))
        result = loop.run(resolve_problem("relu"))
    failed = [body["model"] for body in server.requests].count("down")
    assert failed >= 1 and len(result.errors) == failed and all("HTTP 500" in e for e in result.errors)
    assert loop.bandit.tallies[0] == Tally(answers=failed)
    assert loop.bandit.tallies[1].answers == len(result.candidates) == 4 - failed
