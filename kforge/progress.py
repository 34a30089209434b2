"""Progress of a long batch on stderr: a line per verdict as it comes, with the seconds that candidate took itself
(not those it waited for a compile slot, a device or its reference); on a terminal those lines print above a live
bar that counts the candidates compiling, queued for a compile slot, waiting for a device and running, with an ETA
from the compile and run times so far; then a one-line summary. stdout stays for results (tables or JSON lines)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from statistics import fmean
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

if TYPE_CHECKING:
    from evaluator.sandbox.cgroups import CompilePlan


@dataclass
class _Clock:
    """One candidate's own time: from when a compile slot took it to its compile's end, then its run."""
    compile_from: float | None = None
    compile_s: float = 0.0
    run_from: float | None = None
    run_s: float = 0.0


class BatchProgress:
    """Counts per stage, updated from the evaluator's worker threads; with `show`, a line per verdict, and on a
    terminal a rich bar under them. It starts once the batch's size is known (start), after `before` has said how
    many compile at once. Stored verdicts taken back are counted apart.

    The evaluator hands a job to its compile pool as `compiling`; the pool starts them in that order, `slots` at a
    time, so the rest are shown as queued and their clocks start when a slot takes them."""

    def __init__(self, console: Console, show: bool, before: Callable[[], CompilePlan]):
        self.console, self.show, self.before = console, show, before
        self.total, self.started, self.slots = 0, 0.0, 1
        self.where: dict[str, str] = {}
        self.clocks: dict[str, _Clock] = {}
        self.compiles: list[str] = []  # compiling or queued, in the order the pool starts them
        self.compile_times: list[float] = []
        self.run_times: list[float] = []
        self.judged: Counter[str] = Counter()
        self.device_wait_s = 0.0  # waits for devices other kforge processes held (leases.py)
        self.reused = 0  # stored verdicts of unchanged code, taken back instead of judged again
        self._lock = threading.RLock()  # the bar, redrawn while a verdict line prints, reads the ETA
        self.bar: Progress | None = None

    def start(self, total: int) -> None:
        """Before the first compile: how many candidates will be evaluated."""
        self.slots = self.before().slots
        self.total, self.started = total, time.monotonic()
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(bar_width=10), MofNCompleteColumn(),
                            TimeElapsedColumn(), _Eta(self), console=self.console, disable=not self.show,
                            transient=True)
        self.task = self.bar.add_task(self._describe(), total=total)
        self.bar.__enter__()

    def _describe(self) -> str:
        counts = Counter(self.where.values())
        compiling = min(len(self.compiles), self.slots)
        shown = {"compiling": compiling, "queued": len(self.compiles) - compiling, "waiting": counts["waiting"],
                 "running": counts["running"]}
        return ", ".join(f"{n} {stage}" for stage, n in shown.items() if n) or ("" if self.judged else "starting")

    def stage(self, job, stage: str) -> None:
        """The evaluator says a job entered compiling, waiting (compiled) or running."""
        with self._lock:
            now, key = time.monotonic(), str(job.path)
            clock = self.clocks.setdefault(key, _Clock())
            if stage == "compiling":
                self.compiles.append(key)
            else:
                self._compiled(key, now)
            if stage == "running":
                clock.run_from = now
            self.where[key] = stage
            self._slots_taken(now)
            self.bar.update(self.task, description=self._describe())

    def _compiled(self, key: str, now: float) -> None:
        """A job left its compile (compiled, or judged by it): its compile time counts, a queued one takes its slot."""
        if key in self.compiles:
            self.compiles.remove(key)
            clock = self.clocks[key]
            if clock.compile_from is not None:
                clock.compile_s = now - clock.compile_from
                self.compile_times.append(clock.compile_s)
            self._slots_taken(now)

    def _slots_taken(self, now: float) -> None:
        for key in self.compiles[:self.slots]:
            if self.clocks[key].compile_from is None:
                self.clocks[key].compile_from = now

    def done(self, path: str | None, status: str, device_wait_s: float = 0.0, said: str = "", own_s: float = 0.0) -> None:
        """A verdict: its line says the seconds the evaluator's children of it ran (`own_s`), or where the verdict
        holds none (a compile error) those its compile took here."""
        with self._lock:
            now, key = time.monotonic(), str(path)
            self._compiled(key, now)
            clock = self.clocks.pop(key, _Clock())
            if clock.run_from is not None:
                clock.run_s = now - clock.run_from
                self.run_times.append(clock.run_s)
            self.where.pop(key, None)
            self.judged[status] += 1
            self.device_wait_s += device_wait_s
            self.bar.update(self.task, advance=1, description=self._describe())
            if self.show:  # on a terminal, above the bar
                self.console.print(f"kforge: [{sum(self.judged.values())}/{self.total}] {said or status} "
                                   f"({own_s or clock.compile_s:.0f} s)",
                                   markup=False, highlight=False, soft_wrap=True)

    def eta_s(self) -> float | None:
        """Seconds left: the compiles left shared among the slots, then every candidate not judged yet run one after
        another, each at the mean of those so far (less what a running one or a started compile has done); None
        until a compile and a run (where any are left) have ended."""
        with self._lock:
            now = time.monotonic()
            left = self.total - sum(self.judged.values())
            if (self.compiles and not self.compile_times) or (left and not self.run_times):
                return None
            compile_s = fmean(self.compile_times) if self.compile_times else 0.0
            run_s = fmean(self.run_times) if self.run_times else 0.0
            compiles = sum(max(compile_s - (now - self.clocks[k].compile_from if self.clocks[k].compile_from else 0), 0)
                           for k in self.compiles)
            runs = sum(max(run_s - (now - c.run_from), 0) if c.run_from else run_s for c in self.clocks.values())
            unstaged = left - len(self.clocks)  # judged from the code alone, or not yet heard of
            return compiles / self.slots + runs + max(unstaged, 0) * run_s

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


class _Eta(ProgressColumn):
    """The batch's ETA as h:mm:ss, read afresh at each refresh (it counts down between verdicts)."""

    def __init__(self, batch: BatchProgress):
        super().__init__()
        self.batch = batch

    def render(self, task) -> Text:
        eta = self.batch.eta_s()
        if eta is None:
            return Text("eta -:--:--", style="progress.remaining")
        minutes, seconds = divmod(round(eta), 60)
        return Text(f"eta {minutes // 60}:{minutes % 60:02d}:{seconds:02d}", style="progress.remaining")
