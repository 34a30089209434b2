"""Judge-and-store for answers that arrive one by one (the agent loop): each is stored and looked up the moment it
arrives; what needs judging joins one running evaluator batch (evaluator.parent.stream.JobStream), opened for the
turn's problem before the first answer, so an answer waits for its own compile and its own run, never for the
answers judged before it. Every verdict is stored, then handed to `on_judged` as it comes (from the evaluator's
thread), each followed by those of the answers with the same normalized code."""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import TYPE_CHECKING, Callable

from evaluator.contracts import CandidateJob, EvalSettings
from judging.judge import Judged, Submission, evaluate_and_record, resolve, store_submission, twin_judged

if TYPE_CHECKING:
    from db import Database
    from reference_problems import Problem


class StreamJudge:
    """submit() each answer as it arrives; close() waits for every verdict and raises what stopped the evaluator.
    Leaving the block on an error cancels what is still being judged. On CUDA the batch opens at once (its
    reference starts while the answers are written); on CPU at the first answer that needs it."""

    def __init__(self, database: Database, problems: list[Problem], settings: EvalSettings,
                 on_judged: Callable[[Judged], None]):
        self.database, self.problems, self.settings, self.on_judged = database, problems, settings, on_judged
        self._stream = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._first: dict[str, str] = {}  # normalized code -> the path of its first job, the one judged
        self._twins: dict[str, list[CandidateJob]] = defaultdict(list)  # that path -> later jobs, its verdict's
        self._done: dict[str, Judged] = {}  # path -> its verdict, once it came
        self._by_path: dict[str, CandidateJob] = {}

    def __enter__(self) -> StreamJudge:
        if self.settings.device == "cuda":
            self._open()
        return self

    def __exit__(self, kind, error, trace) -> None:
        if kind is None:
            self.close()
        elif self._stream is not None:
            self._stream.cancel()
            self._thread.join()

    def submit(self, submission: Submission) -> None:
        store_submission(self.database, submission)
        found = resolve(self.database, submission, self.settings, self._first)
        if isinstance(found, Judged):
            return self.on_judged(found)
        if found is not None:
            return self._twin_of(found, submission.job)
        self._by_path[str(submission.job.path)] = submission.job
        self._open()
        self._stream.put(submission.job)

    def close(self) -> None:
        if self._stream is None:
            return
        self._stream.close()
        self._thread.join()
        if self._error is not None:
            raise self._error

    def _twin_of(self, first: str, job: CandidateJob) -> None:
        with self._lock:
            judged = self._done.get(first)
            if judged is None:
                self._twins[first].append(job)
        if judged is not None:
            self.on_judged(twin_judged(judged, job))

    def _open(self) -> None:
        if self._stream is not None:
            return
        from evaluator.parent.stream import JobStream

        self._stream = JobStream(self.problems)
        self._thread = threading.Thread(target=self._judge, name="kforge-judge", daemon=True)
        self._thread.start()

    def _judge(self) -> None:
        try:
            for judged in evaluate_and_record(self.database, self._stream, self.settings, self._by_path):
                path = str(judged.job.path)
                with self._lock:
                    self._done[path] = judged
                    twins = self._twins.pop(path, [])
                self.on_judged(judged)
                for twin in twins:
                    self.on_judged(twin_judged(judged, twin))
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread by close()
            self._error = exc
