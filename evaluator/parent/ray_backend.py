"""Evaluation spread over a Ray cluster: one task per candidate, each on a node's own devices.

A task gets the candidate's and the problem's source text (no shared filesystem is assumed), runs the local
evaluator there (sandboxed children, its own reference run on the same GPU model it times the candidate on),
and returns the Verdict; the driver yields them as they finish and its caller stores them. Ray is optional
(`pip install kforge[ray]`): nothing else in kforge imports it.
"""

from __future__ import annotations

import socket
import tempfile
import threading
from pathlib import Path
from typing import Iterator

from pydantic import BaseModel

from evaluator.contracts import CandidateJob, EvalSettings, EvaluatorError, Verdict
from evaluator.parent.runner import evaluate as evaluate_here
from reference_problems.registry import load_problem_file

_JOINING = threading.Lock()  # one ray.init at a time: a server's workers each call evaluate from a thread of their own


class Shipped(BaseModel):
    """A job as text: what a node without this machine's files needs to evaluate it."""

    candidate_name: str
    candidate_source: bytes  # the job's own bytes: the node judges, and hashes, exactly what the driver stores
    problem_name: str
    problem_source: str

    @classmethod
    def of(cls, job: CandidateJob) -> "Shipped":
        return cls(candidate_name=job.path.name, candidate_source=job.source,
                   problem_name=job.problem.path.name, problem_source=job.problem.source())


def evaluate_shipped(shipped: Shipped, settings: EvalSettings) -> Verdict:
    """Runs on a Ray worker: write the problem file to scratch space and evaluate the candidate's bytes against it
    with the local backend (which writes them for its children itself)."""
    with tempfile.TemporaryDirectory(prefix="kforge-ray-") as scratch:
        problem_path = Path(scratch, shipped.problem_name)
        problem_path.write_text(shipped.problem_source)
        job = CandidateJob(path=Path(scratch, shipped.candidate_name), problem=load_problem_file(problem_path),
                           source=shipped.candidate_source)
        return next(iter(evaluate_here([job], settings)))


def _ray():
    try:
        import ray
    except ImportError:
        raise EvaluatorError("the Ray backend needs Ray: pip install 'kforge[ray]'") from None
    return ray


def _reachable(address: str | None, timeout_s: float = 5.0) -> None:
    """A host:port that does not answer fails here in seconds; Ray itself would retry for minutes."""
    host, _, port = (address or "").removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # None, "auto" or "local": Ray finds or starts the cluster itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise EvaluatorError(f"cannot reach a Ray cluster at {address}: {exc.strerror or exc}") from None


def evaluate(jobs: list[CandidateJob], settings: EvalSettings, address: str | None = None) -> Iterator[Verdict]:
    """Like evaluator.evaluate, on the cluster at `address` (None: start a local one). A task holds one GPU
    (Ray pins it with CUDA_VISIBLE_DEVICES) or, on CPU, the cores its timed run uses plus one for compiles."""
    ray = _ray()
    _reachable(address)
    try:
        with _JOINING:
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False, include_dashboard=False)
    except Exception as exc:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError...: all mean "no cluster"
        raise EvaluatorError(f"cannot start or reach a Ray cluster at {address or 'a new local one'}: "
                             f"{str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}") from None
    resources = {"num_gpus": 1, "num_cpus": 1} if settings.device == "cuda" else {"num_cpus": settings.cpu_threads + 1}
    task = ray.remote(evaluate_shipped).options(max_retries=0, **resources)
    remote = settings.model_copy(update={"gpus": None, "jobs": 1})
    pending = {task.remote(Shipped.of(job), remote): job for job in jobs}
    try:
        while pending:
            (done,), _ = ray.wait(list(pending), num_returns=1)
            job = pending.pop(done)
            try:
                verdict = ray.get(done)
            except ray.exceptions.RayError as exc:  # a lost node or worker: kforge's failure, not the candidate's
                raise EvaluatorError(f"Ray task for {job.path} failed: {str(exc).splitlines()[0]}") from None
            verdict.solution_path = str(job.path)
            yield verdict
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
