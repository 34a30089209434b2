"""Which compiled candidate goes to a device next, and how many are in flight per device: the runner's
scheduling, apart from what it does with each candidate (evaluator.runner)."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from evaluator.batch import Batch
from evaluator.references import OpenProblems

IN_FLIGHT = 4  # candidates per device on CUDA: one holding it, three whose children load meanwhile
AHEAD = 2  # candidates per device on CUDA whose children load before they are admitted


class Dispatcher:
    """Hands compiled candidates to the device runners (`judge_one(*item)` in the pool), candidates of open
    problems first, and a new problem only when OpenProblems has room for its comparer. On CUDA it also asks
    for spare reference children: the problems of compiled candidates, then of those still compiling.

    In flight per device on CUDA: IN_FLIGHT, from what a child costs to load against what a candidate keeps
    the device busy (H100 host, stop 24): a child loads (interpreter, jail, torch) in 3-5 s, ~7 s while others
    load beside it; a warm level-1 candidate keeps the device busy 2.5-3.7 s; 1 + ceil(7 / 2.5) = 4. A child
    never holds the device while it loads (sandbox.Child.begin), but a candidate admitted only when a slot
    frees started its child then, and in level 1 its problem's reference child too: the device idled 27 % of
    a 388 s warm batch (stop 25). So the next AHEAD candidates' children load before admission: ceil(4.5 s
    load / 2.9 s a warm level-1 candidate and its reference keep the device) = 2. A waiting child holds ~0.4 GB
    of host memory (no CUDA yet). On CPU 2 in flight and none ahead: a child is spawned only once the CPU is
    free, so more would only wait."""

    def __init__(self, batch: Batch, problems: OpenProblems, runners: ThreadPoolExecutor | None,
                 judge_one: Callable[..., Any], spawn: Callable[[Any], Any] | None = None):
        self.batch, self.problems, self.runners, self.judge_one = batch, problems, runners, judge_one
        self.spawn = spawn  # prepared candidate -> its child, started (CUDA: children loaded ahead)
        self.ready: list[tuple[Any, Any]] = []  # (prepared candidate, its compile's result)
        self.compiling: list[Any] = []  # prepared candidates still compiling, in the batch's order
        self.running: set[Future] = set()
        self.ahead: dict[int, Any] = {}  # id(prepared candidate) -> its child, loading before admission

    def admit(self) -> set[Future]:
        self.ready.sort(key=lambda item: item[0].job.problem.sha256 not in self.problems.servers)
        cuda = self.batch.settings.device == "cuda"
        depth = IN_FLIGHT if cuda else 2
        for item in list(self.ready):
            problem = item[0].job.problem
            if len(self.running) >= depth * len(self.batch.gpus) or not self.problems.admissible(problem):
                continue
            self.ready.remove(item)
            server = self.problems.server(problem)
            if cuda:
                server.prestart()
            self.running.add(self.runners.submit(self.judge_one, *item, self.ahead.pop(id(item[0]), None)))
        if cuda:
            self.problems.spare([prep.job.problem for prep, _ in self.ready] + [p.job.problem for p in self.compiling])
            self._load_ahead()
        return set(self.running)

    def _load_ahead(self) -> None:
        """Start the children of the next AHEAD candidates per device (in admission order): each is handed to its
        candidate's run when it is admitted."""
        if self.spawn is None:
            return
        for prep, _ in self.ready[:AHEAD * len(self.batch.gpus)]:
            if id(prep) not in self.ahead:
                self.ahead[id(prep)] = self.spawn(prep)

    def close(self) -> None:
        """Stop the children started ahead of candidates that were never admitted (the batch ended early)."""
        for child in self.ahead.values():
            child.finish(wait=False)
        self.ahead.clear()
