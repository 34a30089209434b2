"""Triton autotuning in a candidate child, bounded and costed. `@triton.autotune` benchmarks every config of a
kernel at its first launch with a new key: in kforge that is in the first trial, before any timing, so autotuning is
never timed; but a `do_bench` of the candidate's own (or a slow config) could make it last minutes.

So each config's benchmark gets a budget derived from its own work: its first call (the config's compile and one
launch), plus _SLACK times its second (one launch: Triton's own benchmarker makes about 100 ms of launches, at most
seven of a slow kernel; kforge's on CPU one), plus _FLOOR_S. Past it the benchmark stops with AutotuneTimeout, at
the next call it makes or, in the main thread, by a timer (a benchmark that waits outside the kernel); the verdict
is a `timeout` naming the kernel, the config and the cost (evaluator/verdict/rules.py). Every autotuning's cost
(configs, seconds) goes to the parent with the kernels (protocol.Kernels.autotuned) and is shown in the verdict.

Limits: the run's own budget (the parent's) bounds what this does not: many configs each within its budget, a slow
pruning or config hook (part of each call), a first call that never returns, a timer the candidate takes over, an
autotuning loop of its own outside Triton's."""

from __future__ import annotations

import signal
import threading
import time
from functools import partial, wraps

import torch
from triton.runtime.autotuner import Autotuner
from triton.runtime.driver import driver

_SLACK, _FLOOR_S = 10.0, 1.0


class AutotuneTimeout(BaseException):
    """A config's benchmark ran past its budget. Not an Exception: a candidate's `except Exception` around its launch
    does not swallow it."""


class _Clock:
    """One config's benchmark against its budget: _FLOOR_S, plus its first call once returned (the config's compile
    and a launch), plus _SLACK times its second (a launch alone) or, until that returned, its first again."""

    def __init__(self, name: str, config, done: int, total: int, spent: float):
        self.name, self.config, self.done, self.total, self.spent = name, config, done, total, spent
        self.start, self.first, self.second = time.perf_counter(), None, None
        self.timed = threading.current_thread() is threading.main_thread()  # signal handlers run there only

    def took(self) -> float:
        return time.perf_counter() - self.start

    def budget(self) -> float:
        first = self.first or 0.0
        return _FLOOR_S + first + _SLACK * (first if self.second is None else self.second)

    def over(self) -> AutotuneTimeout:
        if self.first is None:
            calls = "no call returned"
        elif self.second is None:
            calls = f"{_SLACK + 1:.0f} x its first call, {self.first:.2g} s"
        else:
            calls = f"its first call {self.first:.2g} s + {_SLACK:.0f} x its second, {self.second:.2g} s"
        return AutotuneTimeout(
            f"autotuning {self.name} ran past its budget: config {getattr(self.config, 'kwargs', self.config)} "
            f"benchmarked for {self.took():.3g} s, past its budget of {self.budget():.3g} s ({_FLOOR_S:.0f} s + "
            f"{calls}); {self.done} of its {self.total} configs benchmarked before it, in {self.spent:.2g} s")

    def check(self) -> None:
        if self.took() > self.budget():
            raise self.over()

    def arm(self, on: bool = True) -> None:
        """The timer to the budget's end; off while the first call runs (the config's compile is its own work)."""
        if self.timed:
            signal.setitimer(signal.ITIMER_REAL, max(self.budget() - self.took(), 1e-3) if on else 0.0)

    def call(self, kernel_call):
        """kernel_call, held to the budget each time the benchmark makes it; the first two also measured (on a GPU
        to the end of their work)."""
        @wraps(kernel_call)
        def bounded(*args, **kwargs):
            self.check()
            if self.second is not None:
                return kernel_call(*args, **kwargs)
            self.arm(self.first is not None)
            started = time.perf_counter()
            try:
                result = kernel_call(*args, **kwargs)
                if torch.cuda.is_initialized():
                    torch.cuda.synchronize()
            finally:
                took = time.perf_counter() - started
                self.first, self.second = (took, None) if self.first is None else (self.first, took)
            self.arm()
            return result
        return bounded

    def alarm(self, _signum, _frame) -> None:
        raise self.over()


def _bounded(clock: _Clock, bench, kernel_call, *args, **kwargs):
    return bench(clock.call(kernel_call), *args, **kwargs)


class Autotuning:
    """Install once, before the candidate is imported. `costs`: kernel -> [configs benchmarked, seconds]."""

    def __init__(self, default_bench=None):
        self.costs: dict[str, list] = {}
        self._default = default_bench  # where Triton's own asks for a driver there is none (CPU: triton_cpu.bench)
        self._clock: _Clock | None = None

    def install(self) -> None:
        Autotuner.do_bench = property(self._benchmarker)
        Autotuner._bench = self._budgeted(Autotuner._bench)

    def held(self) -> dict[type, tuple[str, ...]]:
        """What install() replaced, for the guard to hold: restoring it unbounds autotuning."""
        return {Autotuner: ("do_bench", "_bench")}

    def _benchmarker(self, tuner: Autotuner):
        bench = tuner._do_bench or self._default or driver.active.get_benchmarker()
        return bench if self._clock is None else partial(_bounded, self._clock, bench)

    def _budgeted(self, bench_config):
        @wraps(bench_config)
        def budgeted(tuner: Autotuner, *args, config, **meta):
            name = tuner.base_fn.__qualname__
            cost = self.costs.setdefault(name, [0, 0.0])
            outer, clock = self._clock, _Clock(name, config, cost[0], len(tuner.configs), cost[1])
            self._clock = clock
            alarm = signal.signal(signal.SIGALRM, clock.alarm) if clock.timed else None
            try:
                clock.arm()
                timings = bench_config(tuner, *args, config=config, **meta)
                clock.check()  # a benchmark that went on past its budget without another call
                return timings
            finally:
                clock.arm(False)
                if clock.timed:
                    signal.signal(signal.SIGALRM, alarm)
                self._clock = outer
                if outer is not None and outer.first is not None:  # autotuned inside another's benchmark
                    outer.arm()
                cost[0], cost[1] = cost[0] + 1, cost[1] + clock.took()
        return budgeted
