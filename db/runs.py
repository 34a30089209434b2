"""Runs and their spend: a run row keeps a generate run's settings, status and wall seconds; what it (or a problem,
or a model) cost is summed from the generations, the one record of every paid call. A mixin of Database."""

from __future__ import annotations

from typing import Any

from sqlalchemy import case, func, select

from db.engine import NotFoundError, guarded
from db.models import Generation, Problem, Run, utcnow
from db.rows import GenerationRow, RunRow, SpendRow, generation_row

SPEND_KEYS = {"run_id": Generation.run_id, "problem": Problem.name, "model": Generation.model}
_TOTALS = (
    func.count(Generation.id),
    func.coalesce(func.sum(Generation.prompt_tokens), 0),
    func.coalesce(func.sum(Generation.completion_tokens), 0),
    func.coalesce(func.sum(Generation.cost_usd), 0.0),
    func.coalesce(func.sum(case((Generation.cost_usd.is_(None), 1), else_=0)), 0),
)


class Runs:
    """Start, read and close runs; sum spend by run, problem and model."""

    @guarded
    def start_run(self, settings: dict[str, Any]) -> int:
        with self.session(write=True) as s, s.begin():
            run = Run(settings=settings)
            s.add(run)
            s.flush()
            return run.id

    @guarded
    def get_run(self, run_id: int) -> RunRow | None:
        with self.session() as s, s.begin():
            run = s.get(Run, run_id)
            if run is None:
                return None
            calls, prompt, completion, cost, _ = s.execute(select(*_TOTALS).where(Generation.run_id == run_id)).one()
            cols = {k: getattr(run, k) for k in ("id", "settings", "status", "stop_reason", "wall_s", "created_at", "updated_at")}
            return RunRow(calls=calls, prompt_tokens=prompt, completion_tokens=completion, cost_usd=cost, **cols)

    @guarded
    def update_run(self, run_id: int, *, status: str | None = None, stop_reason: str | None = None,
                   add_wall_s: float = 0.0, settings: dict[str, Any] | None = None) -> None:
        """Wall seconds add up over the sessions of a resumed run; the other fields are replaced when given."""
        with self.session(write=True) as s, s.begin():
            run = s.get(Run, run_id, with_for_update=True)
            if run is None:
                raise NotFoundError(f"unknown run {run_id}")
            for key, value in (("status", status), ("stop_reason", stop_reason), ("settings", settings)):
                if value is not None:
                    setattr(run, key, value)
            run.wall_s += add_wall_s
            run.updated_at = utcnow()

    @guarded
    def spend(self, by: tuple[str, ...] = ("model",), run_id: int | None = None,
              problem: str | None = None) -> list[SpendRow]:
        """Calls, tokens and dollars grouped by any of run_id, problem and model, optionally for one run or problem."""
        if unknown := set(by) - set(SPEND_KEYS):
            raise ValueError(f"spend can group by {', '.join(SPEND_KEYS)}, not {', '.join(sorted(unknown))}")
        keys = [SPEND_KEYS[k] for k in by]
        stmt = (select(*keys, *_TOTALS).join(Problem, Generation.problem_id == Problem.id).group_by(*keys)
                .order_by(*(k.nulls_first() for k in keys)))  # one order on every backend: calls of no run first
        if run_id is not None:
            stmt = stmt.where(Generation.run_id == run_id)
        if problem is not None:
            stmt = stmt.where(Problem.name == problem)
        with self.session() as s, s.begin():
            rows = s.execute(stmt).all()
        fields = (*by, "calls", "prompt_tokens", "completion_tokens", "cost_usd", "unpriced")
        return [SpendRow(**dict(zip(fields, row, strict=True))) for row in rows]

    @guarded
    def get_generation(self, generation_id: int) -> GenerationRow | None:
        with self.session() as s, s.begin():
            gen = s.get(Generation, generation_id)
            return None if gen is None else generation_row(gen)

    @guarded
    def run_generation(self, run_id: int, problem: str, turn: int, sample: int) -> GenerationRow | None:
        """The call a run already made for this problem, turn and sample: what --resume reuses instead of asking again."""
        stmt = (select(Generation).join(Problem, Generation.problem_id == Problem.id)
                .where(Generation.run_id == run_id, Problem.name == problem, Generation.turn == turn,
                       Generation.sample == sample)
                .order_by(Generation.id.desc()).limit(1))
        with self.session() as s, s.begin():
            gen = s.scalar(stmt)
            return None if gen is None else generation_row(gen)
