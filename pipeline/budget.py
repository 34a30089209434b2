"""Budget stops: a run ends cleanly, between calls, once it has spent its tokens, dollars, wall seconds or
candidates; `--resume` continues it (with a raised budget) from what the db says it spent.

A paid call starts only while every limit is still above what was spent, counting the calls in flight as
candidates. Token and dollar sizes are known only when a call returns, so with several calls in flight the last
ones can carry the spend past a token or dollar limit by at most their own size; at one call in flight a run stops at
the first call that reaches the limit."""

from __future__ import annotations

import threading
import time

from pydantic import BaseModel, Field

from pipeline.ledger import Usage


class BudgetExhausted(Exception):
    """No paid call may start: the message names the limit and the spend that reached it."""


class Budget(BaseModel):
    """None means no limit. Candidates are the LLM answers the run paid for."""

    max_tokens: int | None = Field(None, ge=1)
    max_cost_usd: float | None = Field(None, gt=0)
    max_wall_s: float | None = Field(None, gt=0)
    max_candidates: int | None = Field(None, ge=1)


class Spend(BaseModel):
    tokens: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0
    candidates: int = 0


def exhausted(budget: Budget, spend: Spend) -> str | None:
    """The first limit the spend has reached, as a sentence, or None."""
    checks = (("max_tokens", budget.max_tokens, spend.tokens, "tokens"),
              ("max_cost_usd", budget.max_cost_usd, spend.cost_usd, "USD"),
              ("max_wall_s", budget.max_wall_s, spend.wall_s, "s"),
              ("max_candidates", budget.max_candidates, spend.candidates, "candidates"))
    for name, limit, spent, unit in checks:
        if limit is not None and spent >= limit:
            return f"{name} reached: {spent:g} of {limit:g} {unit}"
    return None


class Meter:
    """A run's spend as it happens, shared by the threads that make its calls: admit() before a paid call,
    settle() or cancel() after it. Starts from what earlier sessions of the run spent."""

    def __init__(self, budget: Budget, spent: Spend | None = None) -> None:
        self.budget = budget
        self._spent = spent or Spend()
        self._start = time.monotonic()
        self._in_flight = 0
        self._lock = threading.Lock()

    def session_wall_s(self) -> float:
        return time.monotonic() - self._start

    def spent(self) -> Spend:
        with self._lock:
            return self._spent.model_copy(update={"wall_s": self._spent.wall_s + self.session_wall_s()})

    def admit(self) -> None:
        """Reserve one candidate for a paid call, or raise BudgetExhausted."""
        with self._lock:
            now = self._spent.model_copy(update={"wall_s": self._spent.wall_s + self.session_wall_s(),
                                                 "candidates": self._spent.candidates + self._in_flight})
            if reason := exhausted(self.budget, now):
                raise BudgetExhausted(reason)
            self._in_flight += 1

    def settle(self, usage: Usage, cost_usd: float | None) -> None:
        with self._lock:
            self._in_flight -= 1
            self._spent.tokens += usage.total
            self._spent.cost_usd += cost_usd or 0.0
            self._spent.candidates += 1

    def cancel(self) -> None:
        """The call failed: nothing was paid, its reservation is released."""
        with self._lock:
            self._in_flight -= 1

    def stop_reason(self) -> str | None:
        return exhausted(self.budget, self.spent())
