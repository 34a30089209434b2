"""The FLOPs of a batch's problems, for the judge's floor: counted once per batch, on torch's meta device, by one
introspect child (evaluator.parent.introspect) that starts beside the compiles. Not in each reference child: torch's
counter imports torch._dynamo on its first use (2-3 s on the H100 host), and a reference child paid it while it
held the device: 109 s of a warm level-1 batch's 480 s (benchmarks/kernelbench_throughput.py). The count needs shapes only, so the meta
device gives what a real call gives."""

from __future__ import annotations

import logging
import threading

from evaluator.parent.batch import Batch
from evaluator.parent.introspect import introspect
from evaluator.protocol import Measured
from reference_problems import Problem

_log = logging.getLogger(__name__)


class ProblemCosts:
    """Starts measuring the problems at once (in a thread); `flops` waits for one problem's answer."""

    def __init__(self, batch: Batch, problems: list[Problem]):
        self.batch = batch
        unique = {str(p.path.resolve()): p for p in problems}  # the child's working directory is its own
        self._found: dict[str, Measured] = {}
        self._done = threading.Condition()
        self._ended = False
        self._thread = threading.Thread(target=self._measure, args=(unique,), daemon=True)
        self._thread.start()

    def _measure(self, problems: dict[str, Problem]) -> None:
        settings = self.batch.settings
        try:
            introspect(list(problems), sandbox=settings.sandbox, limits=settings.limits, stop=self.batch.stop,
                       overrides={path: p.overrides(settings.size) for path, p in problems.items()},
                       on_answer=self._heard, precision=settings.precision)
        except Exception as exc:  # noqa: BLE001 - no FLOPs is a floor not drawn, never the end of the batch
            _log.warning("no FLOPs counted, so no FLOP floor this batch: %s: %s", type(exc).__name__, exc)
        finally:
            with self._done:
                self._ended = True
                self._done.notify_all()

    def _heard(self, path: str, measured: Measured) -> None:
        with self._done:
            self._found[path] = measured
            self._done.notify_all()

    def flops(self, problem: Problem) -> int | None:
        """The FLOPs of one call of the problem at the batch's size; None where none were counted (element-wise
        problems, a model the meta device cannot run, a batch stopped first). Waits until its answer came."""
        found = self._answer(problem, wait=True)
        return found.flops if found else None

    def bytes_moved(self, problem: Problem) -> int | None:
        """The bytes one call of the problem reads and writes (inputs, weights, outputs) at the batch's size, if
        already measured; never waits (the dispatcher asks it)."""
        found = self._answer(problem, wait=False)
        return found.bytes_moved if found else None

    def _answer(self, problem: Problem, wait: bool) -> Measured | None:
        """The problem's measurement, once it came (`wait`) or as far as it has."""
        path = str(problem.path.resolve())
        with self._done:
            if wait:
                self._done.wait_for(lambda: path in self._found or self._ended)
            return self._found.get(path)

    def wait(self) -> None:
        """Until every problem is answered: on CPU the introspect child must be gone before anything is timed."""
        self._thread.join()
