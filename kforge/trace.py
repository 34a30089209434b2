"""The evolution trace: one JSON line per LLM call (generation), oldest first, with what it was asked (prompt kind,
island, parents: a crossover has two), what it cost, and what became of its answer (solution, verdict, speedup,
MAP-Elites cell).
A stored answer a run was given again instead of a paid call is a line of its own, in its place in time: the
reused call's line with `"cached": true`, the run that took it as `run_id`, the call's run as `cached_from_run_id`,
and no tokens or dollars, so the lines' costs add up to what was paid. A call's line says `"cached": false`.
Everything is read from the db, so the trace says what the db says: a near-duplicate answer shows its twin's verdict
and names the twin."""

from __future__ import annotations

import heapq
import json
from collections import Counter
from datetime import datetime
from typing import IO

from db import Database, EvaluationRow, GenerationRow, ReuseRow
from evaluator.contracts import Status
from kforge.lineage import judged_as
from pipeline.archive import ArchiveConfig
from pipeline.features import cell_of


def _latest(evaluations: list[EvaluationRow]) -> dict[str, EvaluationRow]:
    """Per solution, its newest evaluation (the list is newest first)."""
    latest: dict[str, EvaluationRow] = {}
    for ev in evaluations:
        latest.setdefault(ev.solution_sha256, ev)
    return latest


def trace_lines(database: Database) -> list[dict]:
    generations = sorted(database.generations(), key=lambda g: g.id)
    by_id = {g.id: g for g in generations}
    solutions = {s.sha256: s for s in database.solutions()}
    verdicts = _latest(database.evaluations())
    judged = judged_as(list(solutions.values()), verdicts)
    edges = {}
    calls = [_line(g, by_id, solutions, verdicts, judged, edges, database) for g in generations]
    of_call = {line["generation_id"]: line for line in calls}
    reuses = [_reuse_line(of_call[r.generation_id], r) for r in database.reuses()]
    return list(heapq.merge(calls, reuses, key=lambda line: datetime.fromisoformat(line["created_at"])))


def _reuse_line(call: dict, reuse: ReuseRow) -> dict:
    """The reused call's line as the run that took it saw it: the same answer and verdict, nothing paid."""
    return call | {"run_id": reuse.run_id, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0,
                   "created_at": reuse.created_at.isoformat(), "cached": True, "cached_from_run_id": call["run_id"]}


def _line(g: GenerationRow, by_id: dict, solutions: dict, verdicts: dict, judged: dict, edges: dict,
          database: Database) -> dict:
    solution = solutions.get(g.solution_sha256)
    twin = judged.get(g.solution_sha256)
    ev = verdicts.get(twin)
    parent = by_id.get(g.parent_generation_id)
    return {
        "generation_id": g.id, "run_id": g.run_id, "problem": g.problem, "turn": g.turn, "sample": g.sample,
        "island": g.island, "prompt_kind": g.prompt_kind, "parent_generation_id": g.parent_generation_id,
        "parent_generation_ids": g.parent_generation_ids,
        "parent_sha256": parent.solution_sha256 if parent else None, "solution_sha256": g.solution_sha256,
        "model": g.model, "prompt_tokens": g.prompt_tokens, "completion_tokens": g.completion_tokens,
        "cost_usd": g.cost_usd, "extraction": g.extraction_status, "status": ev.status if ev else g.extraction_status,
        "speedup": ev.speedup if ev else None, "device_name": ev.device_name if ev else None,
        "duplicate_of": twin if twin != g.solution_sha256 else None,
        "cell": _cell(g, solution, ev, edges, database), "created_at": g.created_at.isoformat(),
        "cached": False, "cached_from_run_id": None,
    }


def _cell(g: GenerationRow, solution, ev: EvaluationRow | None, edges: dict, database: Database) -> str | None:
    """The MAP-Elites cell of a correct answer, by its run's archive settings (none without an archive)."""
    if g.run_id is None or solution is None or ev is None or ev.status != Status.CORRECT or not ev.speedup:
        return None
    if g.run_id not in edges:
        run = database.get_run(g.run_id)
        archive = (run.settings.get("config") or {}).get("archive") if run else None
        edges[g.run_id] = ArchiveConfig.model_validate(archive).speedup_edges if archive else None
    return cell_of(solution.source, ev.speedup, edges[g.run_id]) if edges[g.run_id] else None


def export_trace(database: Database, out: IO[str]) -> Counter[str]:
    """Writes the trace; how many lines are calls ("generation") and how many reuses ("reuse")."""
    counts: Counter[str] = Counter()
    for line in trace_lines(database):
        out.write(json.dumps(line) + "\n")
        counts["reuse" if line["cached"] else "generation"] += 1
    return counts
