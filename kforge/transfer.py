"""JSONL export and import of stored results, so evaluations move between machines and databases.

One record per line, tagged by "kind": problems, then solutions (parents before children), then
evaluations. Importing is idempotent: problems already stored keep their local row, solutions are
upserted by content hash, and an evaluation of the same code with the same created_at, device and
status is not added twice. Solutions get a new created_at where they are imported.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from db import Database, EvaluationRow, NotFoundError, SolutionRow

PROBLEM_KEYS = ("name", "level", "path", "sha256")
SOLUTION_KEYS = ("sha256", "problem", "source", "path", "origin", "model", "seed_id", "parent_sha256")
EVAL_SKIP = {"id", "solution_path", "problem", "model"}  # belong to the solution, or are local ids


class TransferError(ValueError):
    """A line of an import file that is no kforge export record, or contradicts the target database."""


def _parents_first(solutions: list[SolutionRow]) -> list[SolutionRow]:
    """A child can be stored before its parent is known; upsert_solution needs the parent first."""
    by_sha = {s.sha256: s for s in solutions}
    done: dict[str, SolutionRow] = {}
    for sol in solutions:
        chain = []
        while sol is not None and sol.sha256 not in done and sol not in chain:
            chain.append(sol)
            sol = by_sha.get(sol.parent_sha256)
        done.update((s.sha256, s) for s in reversed(chain))
    return list(done.values())


def export_jsonl(database: Database, out: IO[str]) -> Counter[str]:
    """Writes every problem, solution and evaluation; returns how many of each kind."""
    counts: Counter[str] = Counter()
    problems = [{k: getattr(p, k) for k in PROBLEM_KEYS} for p in database.problems()]
    solutions = [{k: getattr(s, k) for k in SOLUTION_KEYS} for s in _parents_first(database.solutions())]
    evaluations = [e.model_dump(mode="json", exclude=EVAL_SKIP) for e in reversed(database.evaluations())]
    for kind, records in (("problem", problems), ("solution", solutions), ("evaluation", evaluations)):
        for record in records:
            out.write(json.dumps({"kind": kind, **record}) + "\n")
            counts[kind] += 1
    return counts


def _eval_key(sha: str, created_at: datetime, device: str, device_name: str, size: str, status: str) -> tuple:
    return sha, created_at, device, device_name, size, status


def _row_key(row: EvaluationRow) -> tuple:
    return _eval_key(row.solution_sha256, row.created_at, row.device, row.device_name, row.size, row.status)


class Importer:
    """Applies records one by one against what the target database already holds."""

    def __init__(self, database: Database) -> None:
        self.db = database
        self.problems = {p.name for p in database.problems()}
        self.seen = {_row_key(e) for e in database.evaluations()}
        self.counts: Counter[str] = Counter()

    def add(self, record: dict[str, Any]) -> None:
        kind = record.pop("kind")
        added = {"problem": self._problem, "solution": self._solution, "evaluation": self._evaluation}[kind](record)
        self.counts[f"{kind}s {'added' if added else 'already stored'}"] += 1

    def _problem(self, rec: dict[str, Any]) -> bool:
        if rec["name"] in self.problems:
            return False  # the local registration (its file here) wins over the exporting machine's
        self.db.upsert_problem(rec["name"], rec["level"], rec["path"], rec["sha256"])
        self.problems.add(rec["name"])
        return True

    def _solution(self, rec: dict[str, Any]) -> bool:
        known = self.db.get_solution(rec["sha256"]) is not None
        self.db.upsert_solution(rec.pop("sha256"), rec.pop("problem"), **rec)
        return not known

    def _evaluation(self, rec: dict[str, Any]) -> bool:
        rec["created_at"] = datetime.fromisoformat(rec["created_at"])
        sha = rec.pop("solution_sha256")
        key = _eval_key(sha, rec["created_at"], rec["device"], rec["device_name"], rec["size"], rec["status"])
        if key in self.seen:
            return False
        self.db.add_evaluation(sha, **rec)
        self.seen.add(key)
        return True


def import_jsonl(database: Database, path: Path) -> Counter[str]:
    """Adds the records of an export; a bad line stops the import with its line number (records before
    it stay stored, and importing the fixed file again adds only the rest)."""
    importer = Importer(database)
    try:
        with Path(path).open() as lines:
            for number, line in enumerate(lines, 1):
                if line.strip():
                    _add(importer, line, f"{path}:{number}")
    except UnicodeDecodeError:
        raise TransferError(f"{path}: not UTF-8 text (an export is JSON lines)") from None
    except OSError as exc:
        raise TransferError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    return importer.counts


def _add(importer: Importer, line: str, where: str) -> None:
    try:
        importer.add(json.loads(line))
    except (KeyError, TypeError, ValueError, AttributeError, NotFoundError) as exc:
        raise TransferError(f"{where}: cannot import this record: {type(exc).__name__}: {exc}") from None
