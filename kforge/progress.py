"""Progress of a long batch on stderr: how many candidates are compiling, waiting, running and judged, with an ETA,
then a one-line summary. stdout stays for results (tables or JSON lines)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

_STAGES = ("compiling", "waiting", "running")


class BatchProgress:
    """Counts per stage, updated from the evaluator's worker threads; a rich bar when `show` on a terminal, and one
    line per verdict when `show` elsewhere (a log, a pipe: a bar would print nothing there). It starts once the
    batch's size is known (start), after `before` has had its say. Stored verdicts taken back are counted apart."""

    def __init__(self, console: Console, show: bool, before: Callable[[], None]):
        self.console, self.show, self.before = console, show, before
        self.total, self.started = 0, 0.0
        self.where: dict[str, str] = {}
        self.judged: Counter[str] = Counter()
        self.device_wait_s = 0.0  # waits for devices other kforge processes held (leases.py)
        self.reused = 0  # stored verdicts of unchanged code, taken back instead of judged again
        self._lock = threading.Lock()
        self.bar: Progress | None = None

    def start(self, total: int) -> None:
        """Before the first compile: how many candidates will be evaluated."""
        self.before()
        self.total, self.started = total, time.monotonic()
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(bar_width=20), MofNCompleteColumn(),
                            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=self.console,
                            disable=not self.show, transient=True)
        self.task = self.bar.add_task(self._describe(), total=total)
        self.bar.__enter__()

    def _describe(self) -> str:
        counts = Counter(self.where.values())
        return " ".join(f"{stage} {counts[stage]}" for stage in _STAGES) + " judged"

    def stage(self, job, stage: str) -> None:
        with self._lock:
            self.where[str(job.path)] = stage
            self.bar.update(self.task, description=self._describe())

    def done(self, path: str | None, status: str, device_wait_s: float = 0.0, said: str = "") -> None:
        with self._lock:
            self.where.pop(str(path), None)
            self.judged[status] += 1
            self.device_wait_s += device_wait_s
            self.bar.update(self.task, advance=1, description=self._describe())
            if self.show and not self.console.is_terminal:
                self.console.print(f"kforge: [{sum(self.judged.values())}/{self.total}] {said or status} "
                                   f"({time.monotonic() - self.started:.0f} s)", markup=False, highlight=False, soft_wrap=True)

    def __enter__(self) -> "BatchProgress":
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)
        if self.reused and self.show:
            self.console.print(f"kforge: {self.reused} stored verdict(s) of unchanged code on this device taken back, "
                               "not judged again (--rerun judges them again)", markup=False, highlight=False, soft_wrap=True)
        if self.total:
            counts = ", ".join(f"{status} {n}" for status, n in self.judged.most_common())
            left = self.total - sum(self.judged.values())
            self.console.print(f"kforge: judged {sum(self.judged.values())} of {self.total} in "
                               f"{time.monotonic() - self.started:.0f} s" + (f" ({counts})" if counts else "")
                               + (f"; {left} not judged (interrupted)" if left else "")
                               + (f"; waited {self.device_wait_s:.1f} s for devices other kforge processes held"
                                  if self.device_wait_s else ""),
                               markup=False, highlight=False, soft_wrap=True)
