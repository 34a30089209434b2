"""Jobs that arrive while their batch runs: an agent's answers, each handed to the evaluator the moment it is read.

evaluate() takes a JobStream in place of a list. The problems named up front are opened at once (their FLOPs
counted and, on CUDA, their reference children started) before any answer arrives, so the first answer waits for
its own compile only; each later one joins the running batch, compiled on arrival and judged as soon as it is
built and the device is free. What is judged is what a list of the same jobs would get."""

from __future__ import annotations

import queue
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Literal

from evaluator.contracts import CandidateJob
from reference_problems import Problem

Arrival = CandidateJob | Literal["end", "cancelled"]


class JobStream:
    """put() each job as it arrives and close() after the last; cancel() ends the batch without judging the jobs
    still in it. A job's problem must be one named up front: its reference and FLOP count are started for it."""

    def __init__(self, problems: list[Problem]):
        self.problems = list({p.sha256: p for p in problems}.values())
        self._known = {p.sha256 for p in self.problems}
        self._arrivals: queue.Queue[Arrival] = queue.Queue()

    def put(self, job: CandidateJob) -> None:
        if job.problem.sha256 not in self._known:
            raise ValueError(f"{job.problem.name}: not a problem this stream was opened for")
        self._arrivals.put(job)

    def close(self) -> None:
        self._arrivals.put("end")

    def cancel(self) -> None:
        self._arrivals.put("cancelled")

    def next(self) -> Arrival:
        """The next arrival (blocks): a job, "end" after close(), or "cancelled"."""
        return self._arrivals.get()


class Arrivals:
    """The batch's side of a JobStream: the next arrival is waited for in a thread of its own, so the batch's
    loop waits on arrivals, compiles and runs alike. `held`: arrivals whose compile waits (on CPU, while a
    candidate is timed)."""

    def __init__(self, stream: JobStream | None):
        self.stream, self.held = stream, []
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kforge-arrivals")
        self.future: Future | None = self._pool.submit(stream.next) if stream else None

    def waiting(self) -> set[Future]:
        return {self.future} if self.future else set()

    def take(self) -> Arrival:
        """The arrival just come (self.future done), the wait for the next one started unless the stream ended."""
        got = self.future.result()
        self.future = None if got in ("end", "cancelled") else self._pool.submit(self.stream.next)
        return got

    def close(self) -> None:
        if self.stream:
            self.stream.cancel()  # wakes a wait still under way
        self._pool.shutdown(wait=True, cancel_futures=True)
