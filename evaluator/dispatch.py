"""Which compiled candidate goes to a device next, and how many are in flight per device: the runner's
scheduling, apart from what it does with each candidate (evaluator.runner)."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from evaluator.batch import Batch
from evaluator.references import OpenProblems

IN_FLIGHT = 3  # candidates per device on CUDA: one holding it, two ready to take it
AHEAD = 1  # candidates per device on CUDA whose children start before they are admitted


class Dispatcher:
    """Hands compiled candidates to the device runners (`judge_one(*item)` in the pool), candidates of open
    problems first, and a new problem only when OpenProblems has room for its comparer. On CUDA it also asks
    for spare reference children: the problems of compiled candidates, then of those still compiling.

    In flight per device on CUDA: IN_FLIGHT, counted on the GPU its problem is placed on (OpenProblems.gpu_of).
    Children are forked from the fork server (ready in ~0.05 s), and make their CUDA context on their problem's
    GPU (~0.3 s) before they say `loaded`, while another holds the device; a
    warm level-1 candidate and its reference keep it busy ~3 s. So one candidate waiting at the gate beside the
    one running is enough, and a second covers a candidate whose child dies at once; AHEAD starts the next
    candidate's child before its admission. Each waiting child holds a CUDA context (~0.5 GB of the GPU), which
    is why not more. (With children started as interpreters, 4.5 s each on the H100 host, it took 4 in flight
    and 2 ahead: stop 25.) On CPU 2 in flight and none ahead: a child is spawned only once the CPU is free, so
    more would only wait."""

    def __init__(self, batch: Batch, problems: OpenProblems, runners: ThreadPoolExecutor | None,
                 judge_one: Callable[..., Any], spawn: Callable[[Any], Any] | None = None):
        self.batch, self.problems, self.runners, self.judge_one = batch, problems, runners, judge_one
        self.spawn = spawn  # prepared candidate -> its child, started (CUDA: children loaded ahead)
        self.ready: list[tuple[Any, Any]] = []  # (prepared candidate, its compile's result)
        self.compiling: list[Any] = []  # prepared candidates still compiling, in the batch's order
        self.running: set[Future] = set()
        self.on: dict[Future, str | None] = {}  # a running candidate's GPU
        self.ahead: dict[int, Any] = {}  # id(prepared candidate) -> its child, loading before admission

    def _full(self, gpu: str | None, depth: int) -> bool:
        return sum(self.on[future] == gpu for future in self.running) >= depth

    def admit(self) -> set[Future]:
        self.ready.sort(key=lambda item: item[0].job.problem.sha256 not in self.problems.servers)
        cuda = self.batch.settings.device == "cuda"
        depth = IN_FLIGHT if cuda else 2
        self.on = {future: gpu for future, gpu in self.on.items() if future in self.running}
        for item in list(self.ready):
            problem = item[0].job.problem
            if problem.sha256 not in self.problems.placed and all(self._full(g, depth) for g in self.batch.gpus):
                continue  # placed only where it can run now
            gpu = self.problems.gpu_of(problem)
            if self._full(gpu, depth) or not self.problems.admissible(problem):
                continue
            self.ready.remove(item)
            server = self.problems.server(problem)
            if cuda:
                server.prestart()
            future = self.runners.submit(self.judge_one, *item, self.ahead.pop(id(item[0]), None))
            self.running.add(future)
            self.on[future] = gpu
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
