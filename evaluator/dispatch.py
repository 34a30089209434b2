"""Which compiled candidate goes to a device next, and how many are in flight per device: the runner's
scheduling, apart from what it does with each candidate (evaluator.runner)."""

from __future__ import annotations

import math
import statistics
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from evaluator.batch import Batch
from evaluator.references import OpenProblems

MOST_IN_FLIGHT = 4  # per device: a loaded child waiting for its turn holds ~0.4 GB of host memory


class Lookahead:
    """Candidates in flight per device: one holding it, and enough whose children load meanwhile (interpreter,
    jail, torch: 3-5 s on the H100 host, more while others load) that the next is ready when the device is
    free. From the batch's own runs: 1 + ceil(load / busy), the median load time of children the device had
    to wait for (a candidate's or its reference's) over the median time a candidate kept the device busy (its
    hold less that waiting); 2 (one running, one loading) until a child was late, at most MOST_IN_FLIGHT.
    A late child costs its whole lateness in idle device: stop 24's warm level-1 run lost 50 s of 373 s so."""

    def __init__(self) -> None:
        self.loads: list[float] = []
        self.busy: list[float] = []
        self._lock = threading.Lock()

    def heard(self, loads: list[float], busy_s: float) -> None:
        """One candidate's run: the load times of the children its device waited for, and how long it kept the
        device busy."""
        with self._lock:
            self.busy.append(busy_s)
            self.loads.extend(loads)

    def depth(self) -> int:
        with self._lock:
            if not self.loads or not self.busy:
                return 2
            wanted = 1 + math.ceil(statistics.median(self.loads) / max(statistics.median(self.busy), 1e-3))
        return max(2, min(MOST_IN_FLIGHT, wanted))


class Dispatcher:
    """Hands compiled candidates to the device runners (`judge_one(lookahead, *item)` in the pool), as many per device as
    the lookahead says, candidates of open problems first, and a new problem only when OpenProblems has room
    for its comparer. On CUDA it also asks for spare reference children: the problems of compiled candidates,
    then of those still compiling."""

    def __init__(self, batch: Batch, problems: OpenProblems, runners: ThreadPoolExecutor | None,
                 judge_one: Callable[..., Any]):
        self.batch, self.problems, self.runners, self.judge_one = batch, problems, runners, judge_one
        self.lookahead = Lookahead()
        self.ready: list[tuple[Any, Any]] = []  # (prepared candidate, its compile's result)
        self.compiling: list[Any] = []  # prepared candidates still compiling, in the batch's order
        self.running: set[Future] = set()

    def admit(self) -> set[Future]:
        self.ready.sort(key=lambda item: item[0].job.problem.sha256 not in self.problems.servers)
        cuda = self.batch.settings.device == "cuda"
        depth = self.lookahead.depth() if cuda else 2  # on CPU a child is spawned only once the CPU is free
        for item in list(self.ready):
            problem = item[0].job.problem
            if len(self.running) >= depth * len(self.batch.gpus) or not self.problems.admissible(problem):
                continue
            self.ready.remove(item)
            server = self.problems.server(problem)
            if cuda:
                server.prestart()
            self.running.add(self.runners.submit(self.judge_one, self.lookahead, *item))
        if cuda:
            self.problems.spare([prep.job.problem for prep, _ in self.ready] + [p.job.problem for p in self.compiling])
        return set(self.running)
