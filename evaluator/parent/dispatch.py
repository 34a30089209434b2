"""Which compiled candidate goes to a device next, and how many are in flight per device: the runner's
scheduling, apart from what it does with each candidate (evaluator.parent.runner)."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from evaluator.parent.batch import Batch
from evaluator.parent.references import OpenProblems

IN_FLIGHT = 3  # candidates per device on CUDA: one holding it, two ready to take it
AHEAD = 1  # candidates per device on CUDA whose children start before they are admitted


class Dispatcher:
    """Hands compiled candidates to the device runners (`judge_one(*item)` in the pool), candidates of open
    problems first, and a new problem only when OpenProblems has room for its comparer. On CUDA it also asks
    for spare reference children: the problems of compiled candidates, then of those still compiling.

    In flight per device on CUDA: IN_FLIGHT, counted on the GPU each runs on. A candidate runs on a GPU that
    serves its problem (OpenProblems): a new problem is placed where a candidate can start now; a candidate that
    would wait behind another on its problem's GPUs while some GPU has nothing in flight goes to that GPU instead,
    which then serves its problem too (with a reference of its own there): a batch of one problem uses every GPU.
    Children are forked from the fork server (ready in ~0.05 s), and make their CUDA context on their GPU (~0.3 s)
    before they say `loaded`, while another holds the device; a warm level-1 candidate and its reference keep it
    busy ~3 s. So one candidate waiting at the gate beside the one running is enough, and a second covers a
    candidate whose child dies at once; AHEAD starts the next candidate's child before its admission. Each
    waiting child holds a CUDA context (~0.5 GB of the GPU), which is why not more. (With children started as
    interpreters, 4.5 s each on the H100 host, it took 4 in flight and 2 ahead, benchmarks/eval_speed.py.) On CPU 2 in flight and
    none ahead: a child is spawned only once the CPU is free, so more would only wait."""

    def __init__(self, batch: Batch, problems: OpenProblems, runners: ThreadPoolExecutor | None,
                 judge_one: Callable[..., Any], spawn: Callable[[Any, Any], Any] | None = None):
        self.batch, self.problems, self.runners, self.judge_one = batch, problems, runners, judge_one
        self.spawn = spawn  # (prepared candidate, its GPU) -> its child, started (CUDA: children loaded ahead)
        self.ready: list[tuple[Any, Any]] = []  # (prepared candidate, its compile's result)
        self.compiling: list[Any] = []  # prepared candidates still compiling, in the batch's order
        self.expected: list[Any] = []  # problems whose candidates are still to arrive (evaluator.parent.stream)
        self.running: set[Future] = set()
        self.on: dict[Future, str | None] = {}  # a running candidate's GPU
        self.ahead: dict[int, tuple[Any, str | None]] = {}  # id(prepared candidate) -> its child loading before admission, its GPU
        self.depth = IN_FLIGHT if batch.settings.device == "cuda" else 2

    def _count(self, gpu: str | None) -> int:
        return sum(self.on[future] == gpu for future in self.running)

    def admit(self) -> set[Future]:
        self.ready.sort(key=lambda item: not self.problems.is_open(item[0].job.problem))
        self.on = {future: gpu for future, gpu in self.on.items() if future in self.running}
        self._admit_pass(spread=True)
        for gpu in self.batch.gpus:  # a GPU with nothing in flight serves a problem waiting elsewhere too
            if self._count(gpu) > 0:
                continue
            item = next((i for i in self.ready if self.problems.may_extend(i[0].job.problem, gpu)), None)
            if item is not None:
                self.problems.extend(item[0].job.problem, gpu)
                self._start(item, gpu)
        self._admit_pass(spread=False)
        if self.batch.settings.device == "cuda":
            self.problems.spare([prep.job.problem for prep, _ in self.ready] + [p.job.problem for p in self.compiling]
                                + self.expected)
            self._load_ahead()
        return set(self.running)

    def _admit_pass(self, spread: bool) -> None:
        """Each ready candidate to the least busy GPU serving its problem, where it has room; a problem not yet
        placed is placed (where a candidate can start now). `spread`: a candidate that would wait behind another
        while a GPU has nothing in flight is left for that GPU."""
        for item in list(self.ready):
            problem = item[0].job.problem
            gpus = self.problems.gpus_of(problem)
            if not gpus:  # placed now, on one of the least busy GPUs, if one has room
                free = [g for g in self.batch.gpus if self._count(g) < self.depth]
                if not free:
                    continue
                least = min(map(self._count, free))
                gpus = [self.problems.gpu_of(problem, [g for g in free if self._count(g) == least])]
            gpu = min(gpus, key=self._count)
            if self._count(gpu) >= self.depth or not self.problems.admissible(problem, gpu):
                continue
            if spread and self._count(gpu) > 0 and any(self._count(g) == 0 for g in self.batch.gpus):
                continue
            self._start(item, gpu)

    def _start(self, item: tuple[Any, Any], gpu: str | None) -> None:
        """The candidate admitted on `gpu`: its problem's server there made (on CUDA its child started), the
        candidate handed to a runner with its child loaded ahead if that was for this GPU."""
        self.ready.remove(item)
        server = self.problems.server(item[0].job.problem, gpu)
        if self.batch.settings.device == "cuda":
            server.prestart()
        child, loaded_for = self.ahead.pop(id(item[0]), (None, gpu))
        if child is not None and loaded_for != gpu:
            child.finish(wait=False)
            child = None
        future = self.runners.submit(self.judge_one, *item, child, gpu)
        self.running.add(future)
        self.on[future] = gpu

    def _load_ahead(self) -> None:
        """Start the children of the next AHEAD candidates of each device (in admission order, a problem not yet
        placed going where none loads): each is handed to its candidate's run when it is admitted. Counted for all
        devices together, the next two candidates on two H200s were often both for one GPU, and the other waited
        for its next candidate's load (10 of 100 warm level-1 candidates; none on one GPU)."""
        if self.spawn is None:
            return
        loading = Counter(gpu for _, gpu in self.ahead.values())
        for prep, _ in self.ready:
            short = [gpu for gpu in self.batch.gpus if loading[gpu] < AHEAD]
            if not short:
                return
            if id(prep) in self.ahead:
                continue
            gpu = self.problems.gpu_of(prep.job.problem, short)
            if gpu in short:  # else placed before, where a child loads already
                self.ahead[id(prep)] = (self.spawn(prep, gpu), gpu)
                loading[gpu] += 1

    def close(self) -> None:
        """Stop the children started ahead of candidates that were never admitted (the batch ended early)."""
        for child, _ in self.ahead.values():
            child.finish(wait=False)
        self.ahead.clear()
