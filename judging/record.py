"""The one place where verdicts become rows (the evaluator returns them, its callers store them through here), and
code handed over as text becomes the file it is judged from."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from evaluator.contracts import CandidateJob, Verdict
from reference_problems import Problem

if TYPE_CHECKING:  # annotations only: the CLI's start-up must not load SQLAlchemy
    from db import Database

PROVENANCE_KEYS = ("origin", "model", "seed_id", "parent")


def provenance(path: Path) -> dict:
    """Sidecar <name>.json next to a solution: where the code came from (seed, repair, example)."""
    sidecar = path.with_suffix(".json")
    data = json.loads(sidecar.read_text()) if sidecar.is_file() else {}
    return {k: data.get(k) for k in PROVENANCE_KEYS}


def write_candidate(out_dir: Path, problem: str, code: str) -> Path:
    """Code handed over as text, written as the file it is judged from: content-addressed, so identical code shares
    one file and one evaluation."""
    raw = code.encode()
    path = out_dir / problem / f"{hashlib.sha256(raw).hexdigest()}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_bytes(raw)
    return path


def register_problem(database: Database, problem: Problem) -> None:
    database.upsert_problem(problem.name, problem.meta.level, str(problem.path), problem.sha256)


def record_solution(database: Database, job: CandidateJob, *, origin: str | None = None, model: str | None = None,
                    parent_sha256: str | None = None, seed_id: str | None = None,
                    normalized_sha256: str | None = None) -> str:
    """Store the job's bytes, under the hash they are judged by, with their lineage; a parent named in the sidecar
    is stored first. What the sidecar says wins over `seed_id`."""
    prov = provenance(job.path)
    parent = parent_sha256
    if parent is None and prov["parent"]:
        parent_path = job.path.parent / prov["parent"]
        parent = record_solution(database, CandidateJob(path=parent_path, problem=job.problem)) if parent_path.is_file() else None
    register_problem(database, job.problem)
    database.upsert_solution(job.sha256, job.problem.name, job.text, path=str(job.path),
                             origin=origin or prov["origin"] or "submitted", model=model or prov["model"],
                             seed_id=prov["seed_id"] or seed_id, parent_sha256=parent,
                             normalized_sha256=normalized_sha256)
    return job.sha256


def record_verdict(database: Database, verdict: Verdict) -> int:
    """Store one evaluation of an already recorded solution."""
    stats = {k: getattr(verdict, k).model_dump() for k in ("candidate", "reference", "compiled_reference") if getattr(verdict, k)}
    return database.add_evaluation(
        verdict.solution_sha256, status=verdict.status.value, cause=verdict.evidence.cause,
        evidence=verdict.evidence.model_dump(mode="json"), device=verdict.device, device_name=verdict.device_name,
        size=verdict.size, precision=verdict.precision, candidate_ms=verdict.candidate.median_ms if verdict.candidate else None,
        candidate_std_ms=verdict.candidate.std_ms if verdict.candidate else None,
        reference_ms=verdict.reference.median_ms if verdict.reference else None,
        compiled_reference_ms=verdict.compiled_reference.median_ms if verdict.compiled_reference else None,
        speedup=verdict.speedup, speedup_vs_compile=verdict.speedup_vs_compile, torch_version=verdict.torch_version,
        cuda_version=verdict.cuda_version, timings=stats, wall_s=verdict.wall_s,
    )
