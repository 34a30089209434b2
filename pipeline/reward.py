"""Verdicts as rewards for reinforcement learning: a documented mapping from verdict to reward (RewardScale), and a
reward function in the shape TRL's GRPOTrainer calls its `reward_funcs` (KernelReward). A completion's code is
extracted as `kforge generate` extracts an answer's (pipeline.extract), and a call's completions are judged in one
batch (judging.api)."""

from __future__ import annotations

import math
from typing import Any, Sequence

from pydantic import BaseModel, Field, model_validator

from evaluator.contracts import Status, Verdict
from judging.api import Judge, Pair
from pipeline.extract import VERDICT_STATUS, extract

# Which RewardScale field scores each status. Missing on purpose: skipped (never ran here), reference_error and
# kforge_error (kforge's own failures): they say nothing about the code, so they give no reward (None).
TIER = {
    Status.CORRECT: "correct",
    Status.INCORRECT: "incorrect", Status.LEAK: "incorrect",
    Status.RUNTIME_ERROR: "runtime_error", Status.TIMEOUT: "runtime_error",
    Status.COMPILE_ERROR: "compile_error",
    Status.TRUNCATED: "no_code", Status.SYNTAX_ERROR: "no_code", Status.INVALID: "no_code",
    Status.CHEAT: "cheat",
}
FAILURES = ("incorrect", "runtime_error", "compile_error", "no_code")


class RewardScale(BaseModel):
    """Verdict -> reward. A correct kernel earns `correct` plus `speed_weight` per doubling of its speedup over eager
    PyTorch, log2(speedup) clipped to `log2_speedup_range` (0.5x to 8x by default: [0.5, 2.5]); with no speedup
    measured (timing off, a Triton kernel interpreted on CPU) it earns `correct`. Honest failures rise with how far
    the code got; a caught cheat earns least. Enforced: every failure earns less than the slowest correct kernel,
    and a cheat less than every honest failure, so no hack the judge catches pays."""

    correct: float = 1.0
    speed_weight: float = Field(0.5, ge=0)
    log2_speedup_range: tuple[float, float] = (-1.0, 3.0)
    incorrect: float = 0.3  # it ran, and its outputs were wrong (or it leaked memory)
    runtime_error: float = 0.2  # it compiled, then crashed or ran out of time
    compile_error: float = 0.1
    no_code: float = 0.0  # no code block, cut off, not Python, or no ModelNew
    cheat: float = -1.0  # caught gaming the judge (evidence.exploit names how)

    @model_validator(mode="after")
    def _ordered(self) -> RewardScale:
        low, high = self.log2_speedup_range
        failures = [getattr(self, name) for name in FAILURES]
        if low > high:
            raise ValueError(f"log2_speedup_range {self.log2_speedup_range} is empty")
        if max(failures) >= self.slowest_correct:
            raise ValueError(f"a failure would earn {max(failures)}, not less than the slowest correct kernel's "
                             f"{self.slowest_correct}")
        if self.cheat >= min(failures):
            raise ValueError(f"a cheat would earn {self.cheat}, not less than every honest failure")
        return self

    @property
    def slowest_correct(self) -> float:
        return self.correct + self.speed_weight * self.log2_speedup_range[0]

    def of(self, status: Status, speedup: float | None = None) -> float | None:
        """The reward of a status (and a correct kernel's speedup); None where the verdict says nothing of the code."""
        if status not in TIER:
            return None
        if status is not Status.CORRECT or not speedup:
            return getattr(self, TIER[status])
        low, high = self.log2_speedup_range
        return self.correct + self.speed_weight * min(max(math.log2(speedup), low), high)

    def reward(self, verdict: Verdict) -> float | None:
        return self.of(verdict.status, verdict.speedup)


def answer_text(completion: str | Sequence[dict]) -> str:
    """A completion as text: TRL's standard format is the text itself, its conversational format a list of messages,
    whose last holds the answer."""
    return completion if isinstance(completion, str) else completion[-1]["content"]


class KernelReward:
    """A reward function for TRL's GRPOTrainer (`reward_funcs=[KernelReward(judge)]`), or any trainer that calls
    `f(prompts=..., completions=..., **dataset_columns)` for one reward per completion. Each completion's problem is
    its row's `problem` column (TRL passes every column as a keyword), else the `problem` given here. An answer with
    no code to run is scored from its extraction (nothing is stored for it); the rest are judged in one batch, and
    stored. The rewards are RewardScale's, None where kforge could not judge (TRL leaves a None out)."""

    __name__ = "kforge"  # TRL logs each reward function's mean under its name

    def __init__(self, judge: Judge, scale: RewardScale | None = None, problem: str | None = None):
        self.judge, self.scale, self.problem = judge, scale or RewardScale(), problem

    def __call__(self, prompts: Sequence | None = None, completions: Sequence = (),
                 problem: Sequence[str] | None = None, **columns: Any) -> list[float | None]:
        problems = list(problem) if problem is not None else [self.problem] * len(completions)
        if None in problems:
            raise ValueError("no problem for a completion: give the dataset a `problem` column, or "
                             "KernelReward(judge, problem=NAME)")
        return self.rewards(problems, [answer_text(c) for c in completions])

    def rewards(self, problems: Sequence[str], answers: Sequence[str]) -> list[float | None]:
        """One reward per answer to its problem, judged in one batch."""
        extractions = [extract(answer) for answer in answers]
        pairs = [Pair(problem=p, code=e.code) for p, e in zip(problems, extractions) if e.ok]
        judged = iter(self.judge.judge_many(pairs))
        return [self.scale.reward(next(judged).verdict) if e.ok else self.scale.of(VERDICT_STATUS[e.status])
                for e in extractions]
