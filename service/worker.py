"""The server's workers, one queue for all: each takes the queue's next batch (the first queued job and others of
its problem file, so one reference run and one parallel compile serve them all), judges it through
judging.judge.judge_and_store, whose children are jailed (this process runs no candidate code), and gives each
job its one outcome. Locally on CUDA each worker has GPUs of its own (one each, unless told fewer workers), so
batches of several problems are judged at once; on CPU, and behind a Ray cluster, `workers` of them share what
there is. Threads of the server; a batch cut short by the server's death is queued again at its next start
(db.jobs.requeue_running)."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from db import Database, DatabaseError, JobRow
from evaluator.build import BUILD_TIMEOUT_S
from evaluator.contracts import CandidateJob, EvalSettings, EvaluatorError
from evaluator.hardware import visible_gpus
from evaluator.sandbox.cgroups import compile_plan
from judging.judge import Backend, Submission, judge_and_store
from reference_problems import ProblemError, resolve_problem
from service.config import ServiceConfig
from service.intake import board_of, candidate_path, write_once

log = logging.getLogger("kforge.service")


def batch_bound_s(settings: EvalSettings, batch: int) -> float:
    """The longest one batch of up to `batch` jobs may take, so a client can tell a stalled server from a long
    queue: every child it starts ends within the limit, and at worst they run one after another (the problem's
    costs and reference, then per job a compile and, per timed process pair, a reference and a candidate), with
    the precompiled headers' one build on top."""
    pairs = settings.cpu_pairs if settings.device == "cpu" else 1
    return settings.limits.timeout_s * (2 + batch * (1 + 2 * pairs)) + BUILD_TIMEOUT_S


RAY_WORKERS = 2  # batches in flight on a Ray cluster unless told: one judged while the next one's compiles run


def lanes(settings: EvalSettings, workers: int | None, remote: bool) -> list[EvalSettings]:
    """The settings each worker judges with. Locally on CUDA, the GPUs dealt out (one worker each unless fewer are
    asked for), several workers sharing the host's compile slots (one worker plans its own, as `kforge evaluate`
    does); on CPU or a Ray cluster (`remote`: it places each candidate itself), `workers` of them (1 on CPU,
    RAY_WORKERS on Ray) with the settings as they are."""
    if remote or settings.device != "cuda":
        return [settings] * (workers or (RAY_WORKERS if remote else 1))
    gpus = settings.gpus or visible_gpus()
    n = max(1, min(workers or len(gpus), len(gpus)))
    shared = n > 1 and settings.jobs is None
    jobs = max(1, compile_plan(None, len(os.sched_getaffinity(0)), "cuda").slots // n) if shared else settings.jobs
    return [settings.model_copy(update={"gpus": gpus[i::n], "jobs": jobs}) for i in range(n)]


class Workers:
    """The server's workers over one database and one board: started together (after the jobs a stopped server
    left running are queued again, once) and stopped together."""

    def __init__(self, database: Database, settings: EvalSettings, config: ServiceConfig,
                 problems_dir: Path | None, backend: Backend | None = None) -> None:
        self.database, self.board = database, board_of(settings)
        self.workers = [Worker(database, lane, config, problems_dir, backend, name=f"kforge-worker-{i}")
                        for i, lane in enumerate(lanes(settings, config.workers, backend is not None))]

    def start(self) -> None:
        if resumed := self.database.requeue_running(self.board):
            log.info("%d job(s) left running by the last server queued again", resumed)
        for worker in self.workers:
            worker.start()

    def stop(self) -> None:
        """No batch starts after this; one under way ends with the process (its jobs are queued again next start)."""
        for worker in self.workers:
            worker.stop()


class Worker:
    """Judges the board's queue until stopped, a batch at a time, with the local evaluator or `backend`."""

    def __init__(self, database: Database, settings: EvalSettings, config: ServiceConfig,
                 problems_dir: Path | None, backend: Backend | None = None, name: str = "kforge-worker") -> None:
        self.database, self.settings, self.config, self.problems_dir = database, settings, config, problems_dir
        self.board, self.backend = board_of(settings), backend
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            batch = self.database.take_jobs(self.board, self.config.batch)
            if not batch:
                self._stop.wait(self.config.poll_s)
                continue
            try:
                self.judge(batch)
            except Exception as exc:  # noqa: BLE001 - kforge's own failure: the jobs say so, the server goes on
                log.exception("judging a batch failed")
                self._fail(batch, f"kforge's own error: {type(exc).__name__}: {exc}")

    def judge(self, batch: list[JobRow]) -> None:
        """Each job of the batch finished once: with the verdict judge_and_store stored or took back, or failed
        with why it could not be judged."""
        jobs = {}
        for row in batch:
            try:
                jobs[row.candidate_sha256] = (row, self._candidate(row))
            except ProblemError as exc:
                self.database.finish_job(row.id, error=str(exc))
        submissions = [Submission(job=job) for _, job in jobs.values()]
        try:
            for judged in judge_and_store(self.database, submissions, self.settings, backend=self.backend):
                self.database.finish_job(jobs[judged.job.sha256][0].id, evaluation_id=judged.evaluation_id)
        except (DatabaseError, EvaluatorError, ProblemError) as exc:
            self._fail([row for row, _ in jobs.values()], str(exc))

    def _candidate(self, row: JobRow) -> CandidateJob:
        """The job's code and problem as the evaluator takes them. ProblemError: its problem file is gone or
        changed since it was queued, or its code is stored for another problem (one code, one problem)."""
        problem = resolve_problem(row.problem_path, self.problems_dir)
        if problem.sha256 != row.problem_sha256:
            raise ProblemError(f"problem file {row.problem_path} changed since the job was queued")
        stored = self.database.get_solution(row.candidate_sha256)
        if stored is not None and stored.problem != problem.name:
            raise ProblemError(f"this code is stored for problem {stored.problem!r}: one code is judged against one problem")
        path = write_once(candidate_path(self.config.work_dir, row.candidate_sha256), row.source)
        return CandidateJob(path=path, problem=problem, source=row.source.encode())

    def _fail(self, rows: list[JobRow], why: str) -> None:
        """Every job of these not finished yet fails with why (finish_job leaves a finished one as it is)."""
        for row in rows:
            self.database.finish_job(row.id, error=why)
