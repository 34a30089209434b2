"""Model choice by value: the arms are (model, temperature) pairs, each behind its own Provider, and an
epsilon-greedy bandit sends each request to the arm whose answers improved most per unit of cost.

- Reward of a judged answer: max(0, its speedup - the best speedup already known for its problem, or its parent's
  when that is higher) when it is correct, else 0; a near-duplicate of a judged answer earns nothing and still costs
  its price. New speed, not speed: re-sending a known kernel, or another arm's, earns nothing (pipeline/loop.py
  keeps the best known: the run's start, then each answer credited in turn and sample order).
- Cost: the answer's USD when every answer told so far was priced, else its tokens (prompt + completion), so that
  all arms are measured in one unit. An arm's value is its summed reward over its summed cost.
- Choice: an arm with fewer than `warmup` answers goes first (the least tried, then the first listed); then with
  probability `epsilon` a uniform draw, else the arm of highest value (ties drawn).
- Determinism: each draw is seeded by (seed, problem, turn, sample), and a turn's arms are assigned in sample order
  from what earlier turns taught (the answers assigned earlier in the same turn count as tried). The tallies live in
  memory: a resumed run replays its stored answers and stored verdicts turn by turn and tells the bandit each, so
  it rebuilds the same tallies and asks the same arm for the same slot. A failed call counts as an answer that
  earned nothing and cost nothing, so an arm whose server is down stops getting requests after its warm-up; the
  failure is not stored, so a resumed session asks that slot again and may draw differently from there on.
One arm (one model, one temperature) draws nothing: the run is what it was without a bandit."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from pydantic import BaseModel, Field

from pipeline.ledger import Usage
from pipeline.llm import Provider


class BanditConfig(BaseModel):
    temperatures: list[float] = Field(default_factory=list)  # each model is an arm per temperature; []: the run's one
    epsilon: float = Field(0.1, ge=0, le=1)  # after warm-up, the share of requests sent to an arm drawn uniformly
    warmup: int = Field(1, ge=0)  # answers each arm gets before its value decides
    seed: int = 0  # seeds the per-slot draws


@dataclass(frozen=True)
class Arm:
    provider: Provider
    temperature: float | None


class Tally(BaseModel):
    """What one arm's judged answers earned and cost."""

    answers: int = 0
    reward: float = 0.0
    tokens: int = 0
    cost_usd: float = 0.0
    unpriced: int = 0  # answers with no price: while any arm has one, costs are counted in tokens


def improvement(speedup: float | None, baseline: float | None) -> float:
    """The reward of an answer: speedup (None: not correct, or a near-duplicate) gained over the baseline (None:
    nothing correct known)."""
    return 0.0 if speedup is None else max(0.0, speedup - (baseline or 0.0))


def values(tallies: list[Tally]) -> list[float]:
    """Each arm's reward per unit of cost (USD if every answer was priced, else tokens); free reward is worth most."""
    in_usd = not any(t.unpriced for t in tallies)

    def value(t: Tally) -> float:
        cost = t.cost_usd if in_usd else t.tokens
        return t.reward / cost if cost else (math.inf if t.reward else 0.0)

    return [value(t) for t in tallies]


def choose(tallies: list[Tally], pending: list[int], config: BanditConfig, rng: random.Random) -> int:
    """The arm for one request; pending counts the requests already assigned to each arm and not yet judged."""
    tried = [t.answers + p for t, p in zip(tallies, pending)]
    fresh = [i for i, n in enumerate(tried) if n < config.warmup]
    if fresh:
        return min(fresh, key=lambda i: (tried[i], i))
    if rng.random() < config.epsilon:
        return rng.randrange(len(tallies))
    scores = values(tallies)
    return rng.choice([i for i, v in enumerate(scores) if v == max(scores)])


def slot_rng(config: BanditConfig, problem: str, turn: int, sample: int) -> random.Random:
    """One generator per slot: a draw depends on neither thread order nor on which session makes it."""
    return random.Random(f"bandit/{config.seed}/{problem}/{turn}/{sample}")


class Bandit:
    """The run's arms and their tallies: assign() before a turn's requests, tell() once each answer is judged."""

    def __init__(self, arms: list[Arm], config: BanditConfig) -> None:
        if not arms:
            raise ValueError("a bandit needs at least one arm")
        self.arms, self.config = arms, config
        self.tallies = [Tally() for _ in arms]

    @classmethod
    def over(cls, providers: list[Provider], temperature: float | None, config: BanditConfig) -> Bandit:
        """Every provider at every configured temperature (the run's temperature when none is)."""
        temperatures = config.temperatures or [temperature]
        return cls([Arm(p, t) for p in providers for t in temperatures], config)

    @property
    def learning(self) -> bool:
        return len(self.arms) > 1

    def assign(self, problem: str, turn: int, samples: list[int]) -> list[int]:
        """The arm of each sample of a turn, in sample order."""
        if not self.learning:
            return [0] * len(samples)
        pending, chosen = [0] * len(self.arms), []
        for sample in samples:
            arm = choose(self.tallies, pending, self.config, slot_rng(self.config, problem, turn, sample))
            pending[arm] += 1
            chosen.append(arm)
        return chosen

    def tell(self, arm: int, usage: Usage, cost_usd: float | None, reward: float) -> None:
        t = self.tallies[arm]
        t.answers += 1
        t.reward += reward
        t.tokens += usage.total
        t.cost_usd += cost_usd or 0.0
        t.unpriced += cost_usd is None
