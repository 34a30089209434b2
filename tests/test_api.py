"""Judging from Python (judging.api) and its rewards (pipeline.reward), on real parts: jailed CPU evaluations of small
C++ candidates, a SQLite file, the CLI as a subprocess, and the example a trainer would copy."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import pytest

from conftest import CANDIDATES, ROOT, SOLUTIONS, kforge_runner
from evaluator import Status
from evaluator.parent import runner
from judging.api import Judge, Judgment, Pair
from pipeline.reward import KernelReward, RewardScale
from reference_problems import ProblemError

PROBLEM = "scale_bias_hardswish"
# name -> (problem, code, the status it earns on CPU)
CASES = {
    "fast": (PROBLEM, (SOLUTIONS / PROBLEM / "cpu_fused_o3.py").read_text(), Status.CORRECT),
    "slow": (PROBLEM, (CANDIDATES / PROBLEM / "same_as_reference.py").read_text(), Status.CORRECT),
    "wrong": (PROBLEM, (SOLUTIONS / PROBLEM / "cpu_wrong.py").read_text(), Status.INCORRECT),
    "broken": (PROBLEM, (SOLUTIONS / PROBLEM / "cpu_compile_error.py").read_text(), Status.COMPILE_ERROR),
    "torch_only": ("relu", (ROOT / "tests" / "adversarial" / "relu" / "torch_only.py").read_text(), Status.CHEAT),
    "cuda": ("conv1d", (SOLUTIONS / "conv1d" / "repair_002_cpp_sources.py").read_text(), Status.SKIPPED),
}
NAMES = [*CASES, "fast"]  # the fast kernel twice: judged once
PAIRS = [Pair(problem=CASES[name][0], code=CASES[name][1]) for name in NAMES]


class Batch(NamedTuple):
    judge: Judge
    url: str
    judgments: list[Judgment]  # NAMES'
    batches: list[int]  # the jobs of each evaluator batch the call started
    wall_s: float

    def of(self, name: str) -> Judgment:
        return self.judgments[NAMES.index(name)]


def statuses(judgments: list[Judgment]) -> list[Status]:
    return [j.verdict.status for j in judgments]


@pytest.fixture(scope="module")
def batch(tmp_path_factory, cpu_settings) -> Batch:
    """Every case judged in one judge_many call, into a SQLite file of its own."""
    root = tmp_path_factory.mktemp("api")
    url = f"sqlite:///{root / 'sync.db'}"
    batches: list[int] = []
    evaluate = runner.evaluate

    def counted(jobs, settings, **hooks):
        batches.append(len(jobs))
        yield from evaluate(jobs, settings, **hooks)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runner, "evaluate", counted)
        judge = Judge(db=url, settings=cpu_settings, out_dir=root / "candidates")
        start = time.monotonic()
        judgments = judge.judge_many(PAIRS)
        wall_s = time.monotonic() - start
    print(f"judge_many: {len(PAIRS)} pairs in {wall_s:.0f} s:",
          ", ".join(f"{n} {j.verdict.status.value} {j.verdict.speedup or ''}" for n, j in zip(NAMES, judgments)))
    return Batch(judge, url, judgments, batches, wall_s)


@pytest.mark.slow
def test_many_pairs_are_judged_in_one_batch_and_answered_in_their_order(batch):
    judgments = batch.judgments
    assert statuses(judgments) == [CASES[name][2] for name in NAMES], [j.verdict.evidence.cause for j in judgments]
    assert batch.batches == [len(CASES)]  # one evaluator batch; the repeated pair is not a job of its own
    assert judgments[-1] == judgments[0]
    assert all(j.evaluation_id is not None and not j.reused for j in judgments)
    assert batch.of("torch_only").verdict.evidence.exploit == "no_custom_kernel"
    assert batch.of("fast").verdict.speedup > batch.of("slow").verdict.speedup
    stored = batch.judge.backend.database.evaluations()
    assert sorted(row.id for row in stored) == sorted({j.evaluation_id for j in judgments})


@pytest.mark.slow
def test_asyncio_gives_the_verdicts_judge_many_gave(batch, tmp_path, cpu_settings):
    """Judged afresh in a db of its own, while the event loop goes on; then two calls at once take turns."""
    judge = Judge(db=f"sqlite:///{tmp_path / 'async.db'}", settings=cpu_settings, out_dir=tmp_path / "candidates")

    async def judged_while_ticking() -> tuple[list[Judgment], int]:
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.1)
                ticks += 1

        ticker = asyncio.create_task(tick())
        judgments = await judge.ajudge_many(PAIRS)
        ticker.cancel()
        return judgments, ticks

    start = time.monotonic()
    judgments, ticks = asyncio.run(judged_while_ticking())
    print(f"ajudge_many: {len(PAIRS)} pairs in {time.monotonic() - start:.0f} s, the loop ticking {ticks} times:",
          ", ".join(f"{j.verdict.status.value} {j.verdict.speedup or ''}" for j in judgments))
    assert statuses(judgments) == statuses(batch.judgments)
    assert ticks > 10  # the loop ran meanwhile
    fast, wrong = asyncio.run(_both(judge, CASES["fast"][:2], CASES["wrong"][:2]))
    assert (fast.reused, wrong.reused) == (True, True)
    assert (fast.evaluation_id, wrong.evaluation_id) == (judgments[0].evaluation_id, judgments[2].evaluation_id)


async def _both(judge: Judge, first: tuple[str, str], second: tuple[str, str]) -> list[Judgment]:
    return await asyncio.gather(judge.ajudge(*first), judge.ajudge(*second))


@pytest.mark.slow
def test_the_cli_gives_the_verdicts_the_api_gave(batch, tmp_path, build_root):
    """`kforge evaluate` on the same code, as files in folders named after their problems."""
    for name, (problem, code, _) in CASES.items():
        (tmp_path / "tree" / problem).mkdir(parents=True, exist_ok=True)
        (tmp_path / "tree" / problem / f"{name}.py").write_text(code)
    kforge = kforge_runner(tmp_path, build_root)
    lines = [json.loads(line) for line in
             kforge("evaluate", str(tmp_path / "tree"), "--device", "cpu", "--json").stdout.splitlines()]
    by_file = {Path(line["path"]).stem: Status(line["status"]) for line in lines}
    assert by_file == {name: batch.of(name).verdict.status for name in CASES}


@pytest.mark.slow
def test_rewards_rank_real_verdicts_cheat_below_failures_below_slow_below_fast(batch):
    scale = RewardScale()
    reward = {name: scale.reward(batch.of(name).verdict) for name in CASES}
    print("rewards:", reward)
    assert reward["torch_only"] < min(reward["wrong"], reward["broken"])
    assert max(reward["wrong"], reward["broken"]) < reward["slow"] < reward["fast"]
    assert reward["cuda"] is None  # skipped: it never ran here, so it says nothing of the code


@pytest.mark.slow
def test_completions_are_extracted_as_generate_does_and_reused_verdicts_count_the_same(batch):
    """A trainer's call: conversational and plain completions, prose around the code block, one with no code."""
    fast, wrong = CASES["fast"][1], CASES["wrong"][1]
    completions = [[{"role": "assistant", "content": f"Fused, one pass:\n\n```python\n{fast}```\nDone."}],
                   f"Here it is.\n```python\n{wrong}```", "Fusing the ops would help; no code today."]
    before = len(batch.judge.backend.database.evaluations())
    rewards = KernelReward(batch.judge)(prompts=["p"] * 3, completions=completions, problem=[PROBLEM] * 3)
    scale = RewardScale()
    assert rewards == [scale.reward(batch.of("fast").verdict), scale.reward(batch.of("wrong").verdict), scale.no_code]
    assert len(batch.judge.backend.database.evaluations()) == before  # taken back, not judged again


@pytest.mark.slow
def test_the_example_runs_the_way_a_trainer_calls_it(batch, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KFORGE_")} | {"HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(ROOT / "docs" / "examples" / "grpo_reward.py"), "--db", batch.url],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    scale = RewardScale()
    assert proc.stdout.splitlines() == [f"fused kernel: {scale.reward(batch.of('fast').verdict)}",
                                        f"wrong kernel: {scale.reward(batch.of('wrong').verdict)}",
                                        f"no code: {scale.no_code}"]


def test_a_bad_problem_name_is_one_clear_error_and_nothing_is_stored(tmp_path):
    judge = Judge(db=f"sqlite:///{tmp_path / 'k.db'}", out_dir=tmp_path / "candidates")
    with pytest.raises(ProblemError, match="unknown problem 'scale_bias_hardswis'; did you mean scale_bias_hardswish"):
        judge.judge_many([CASES["torch_only"][:2], ("scale_bias_hardswis", CASES["fast"][1])])
    assert judge.backend.database.solutions() == [] and not (tmp_path / "candidates").exists()
    with pytest.raises(ValueError, match="no problem for a completion"):
        KernelReward(judge)(prompts=["p"], completions=["```python\nx = 1\n```"])


def test_a_scale_that_would_pay_a_failure_or_a_cheat_is_refused():
    with pytest.raises(ValueError, match="not less than the slowest correct kernel"):
        RewardScale(incorrect=0.6)
    with pytest.raises(ValueError, match="a cheat would earn"):
        RewardScale(cheat=0.0)
    with pytest.raises(TypeError, match="not both"):
        Judge(backend=object(), db="sqlite://")
