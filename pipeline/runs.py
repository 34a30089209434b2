"""A run as the db keeps it: what `kforge generate` was asked to do (so `--resume ID` does the same), its status,
and its spend so far (the meter of a resumed run starts there)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from db import Database
from evaluator.protocol import Precision
from pipeline.budget import Budget, Meter, Spend
from pipeline.loop import RunConfig, RunResult


class RunError(ValueError):
    """No such run to resume."""


class RunSpec(BaseModel):
    """Everything that decides a run's requests; stored as the run's settings."""

    problems: list[str]
    model: str | None = None
    models: list[str] = Field(default_factory=list)  # more beside model: a bandit picks per request
    base_url: str | None = None
    replay: str | None = None
    device: str
    size: str
    backend: str | None = None  # the kernel language answers are judged as (--backend); None: read from each one's code
    precision: Precision = "fp32"  # the dtype inputs and models are cast to (--precision)
    config: RunConfig


def start(database: Database, spec: RunSpec) -> tuple[int, Meter]:
    run_id = database.start_run(spec.model_dump(mode="json"))
    return run_id, Meter(spec.config.budget)


def resume(database: Database, run_id: int, budget: Budget | None) -> tuple[RunSpec, Meter]:
    """The stored spec (with a new budget when one is given, e.g. a raised limit) and a meter at the run's spend."""
    row = database.get_run(run_id)
    if row is None:
        raise RunError(f"no run {run_id} in {database.url} (runs are numbered from 1; see generate's output)")
    spec = RunSpec.model_validate(row.settings)
    if budget is not None:
        spec.config.budget = budget
        database.update_run(run_id, settings=spec.model_dump(mode="json"))
    spent = Spend(tokens=row.prompt_tokens + row.completion_tokens, cost_usd=row.cost_usd, wall_s=row.wall_s,
                  candidates=row.calls)
    return spec, Meter(spec.config.budget, spent)


def finish(database: Database, run_id: int, meter: Meter, results: list[RunResult]) -> str | None:
    """Record how the session ended (stopped by a budget, or finished) and its wall seconds; the stop reason."""
    reason = next((r.stopped for r in results if r.stopped), None)
    database.update_run(run_id, status="stopped" if reason else "finished", stop_reason=reason or "",
                        add_wall_s=meter.session_wall_s())
    return reason
