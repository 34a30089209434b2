"""A request turned into a stored job: the problem resolved (a registered name, or a problem file's text kept by
content hash; one the server cannot judge is refused, nothing stored), both written where the worker judges them
from, and the job queued under its dedupe key within the client's limit of open jobs. The candidate is not checked
here: code that is no candidate is judged (invalid, syntax_error) as judging.api judges it, since a trainer needs a
verdict for every sample, not a refusal."""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path

from db import Database, JobRow
from evaluator.contracts import EvalSettings
from reference_problems import Problem, ProblemError, resolve_problem
from service.contracts import JobRequest
from service.limits import OpenJobLimit


class Refused(ValueError):
    """The request names no problem the server can judge: said in one line that starts with the field it came in
    (problem or problem_source), as a body that does not fit the contract is; nothing stored."""


def board_of(settings: EvalSettings) -> str:
    """The board a server judges on: its jobs are keyed by it, and a server takes only its own board's jobs."""
    return f"{settings.device}/{settings.size}/{settings.precision}"


def candidate_path(work_dir: Path, sha256: str) -> Path:
    """Where a candidate's code lies while it is judged: named by its hash, so one code is one file."""
    return work_dir / "candidates" / f"{sha256}.py"


def write_once(path: Path, text: str) -> Path:
    """The text at path, written whole (a rename) unless it is there already: content-addressed files never change.
    Each writer has a partial file of its own, so requests writing the same file at once never share one."""
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{secrets.token_hex(8)}.part")
        partial.write_text(text)
        os.replace(partial, path)
    return path


def problem_of(request: JobRequest, work_dir: Path, problems_dir: Path | None, settings: EvalSettings) -> Problem:
    """The problem the request names, at the server's size (a problem without that size is refused here)."""
    field = "problem" if request.problem is not None else "problem_source"
    try:
        if request.problem is not None:
            problem = resolve_problem(request.problem, problems_dir)
        else:
            digest = hashlib.sha256(request.problem_source.encode()).hexdigest()
            kept = write_once(work_dir / "problems" / digest / f"{request.problem_name}.py", request.problem_source)
            problem = resolve_problem(str(kept), problems_dir)
        problem.overrides(settings.size)
    except ProblemError as exc:
        raise Refused(f"{field}: {exc}") from None
    return problem


def accept(database: Database, client: str, request: JobRequest, settings: EvalSettings, work_dir: Path,
           problems_dir: Path | None, limit: OpenJobLimit) -> tuple[JobRow, bool]:
    """The client's job for the request, made (True) or the one already there for the same code, problem and
    board (False); TooManyOpenJobs where it would queue one past the client's limit."""
    problem = problem_of(request, work_dir, problems_dir, settings)
    sha = hashlib.sha256(request.candidate.encode()).hexdigest()
    board = board_of(settings)
    key = hashlib.sha256(f"{problem.sha256}\n{sha}\n{board}".encode()).hexdigest()
    return limit.enqueue(database, client, key, board, problem_name=problem.name, problem_path=str(problem.path),
                         problem_sha256=problem.sha256, candidate_sha256=sha, source=request.candidate)
