"""Interleaved timing, the parent's side (issue 19): the reference is timed beside every round of the candidate.

The candidate child times its reps in small rounds and stops before each (a `pace` message) until the parent
answers. Meanwhile the parent has the problem's reference child (its comparer, alive anyway) time the same
number of reps on the same per-rep inputs, before or after the candidate's round as a secret coin falls. What
disturbs the machine then (another process, a clock change) lands on both sides of a pair, and the speedup is
the median of the per-pair ratios (timing.paired_ratio) with its interval. The parent, not the candidate's
process, decides when the ratio is known well enough to stop. While the reference runs, every process of the
candidate is stopped (`hold`): threads it left spinning cannot slow the reference's side of a pair.
"""

from __future__ import annotations

import contextlib
import random
import time
from dataclasses import dataclass, field
from typing import Callable

from pydantic import ValidationError

from evaluator.protocol import Go, Pace, misfits
from evaluator.timing import paired_ratio, tight

MIN_PAIRS = 6  # pairs before the ratio's interval may stop the rounds: the fewest whose extremes are a 95 % interval
MAX_ROUND = 10  # reps of one round (timing._ROUND): a pace asking for more was not written by the harness

TimeBlock = Callable[[int, int], "list[float] | str"]  # (first rep, reps) -> the reference's samples, or why not


@dataclass
class Paired:
    """The blocks of both sides, index k of each timed beside the other; what went wrong, if anything."""

    reference: list[list[float]] = field(default_factory=list)
    candidate: list[list[float]] = field(default_factory=list)
    forged: str = ""  # a pace message the harness would not send
    failed: str = ""  # the reference could not be timed (its child died): the ratio falls back to medians
    paused_s: float = 0.0  # the candidate's timed loop waited this long on the parent: not the candidate's time

    def usable(self, samples: list[float]) -> bool:
        """Whether every candidate round has its reference block and the rounds are the samples it reported."""
        return (not self.failed and bool(self.candidate) and len(self.reference) == len(self.candidate)
                and [s for block in self.candidate for s in block] == samples)

    def ratio(self) -> tuple[float, float, float]:
        return paired_ratio(self.reference, self.candidate)


class Pacer:
    """Answers a candidate child's `pace` messages (the runner's relay calls it), keeping both sides' blocks."""

    def __init__(self, time_block: TimeBlock, rel_ci: float | None, max_reps: int, on: bool = True):
        self.time_block, self.rel_ci, self.max_reps, self.on = time_block, rel_ci, max_reps, on
        self.hold = contextlib.nullcontext  # what keeps the candidate still while the reference runs (Child.paused)
        self.paired = Paired()
        self._owed: tuple[int, int] | None = None  # a candidate round whose reference block comes after it
        self._coin = random.SystemRandom()

    def __call__(self, message: dict) -> Go:
        start = time.monotonic()
        try:
            return self._answer(message)
        finally:
            self.paired.paused_s += time.monotonic() - start

    def _answer(self, message: dict) -> Go:
        try:
            pace = Pace.model_validate(message)
        except ValidationError as exc:
            return self._refuse(f"a malformed pace message ({misfits(exc)})")
        if not self.on:
            return self._refuse("a pace message, but this batch times reference and candidate apart")
        if pace.reps > MAX_ROUND or pace.which + pace.reps > self.max_reps or len(pace.last_round) > MAX_ROUND:
            return self._refuse(f"a pace message asking for {pace.reps} reps from rep {pace.which}")
        if pace.last_round:
            self.paired.candidate.append(pace.last_round)
        if self._owed:
            self._time(*self._owed)
            self._owed = None
        go = pace.reps > 0 and (pace.which < pace.least or not self._settled())
        if go and not self.paired.failed:
            if self._coin.random() < 0.5:
                self._time(pace.which, pace.reps)
            else:
                self._owed = (pace.which, pace.reps)
        return Go(go=go)

    def _refuse(self, why: str) -> Go:
        self.paired.forged = self.paired.forged or why
        return Go(go=False)

    def _time(self, first: int, reps: int) -> None:
        with self.hold():
            samples = self.time_block(first, reps)
        if isinstance(samples, str):
            self.paired.failed = self.paired.failed or samples
        else:
            self.paired.reference.append(samples)

    def _settled(self) -> bool:
        """Enough pairs, and the median ratio's 95 % interval within +-rel_ci of it."""
        paired = self.paired
        if self.rel_ci is None or len(paired.candidate) < MIN_PAIRS or len(paired.reference) != len(paired.candidate):
            return False
        return tight(*paired.ratio(), self.rel_ci)
