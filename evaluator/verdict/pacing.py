"""Interleaved timing, the parent's side: the reference is timed beside every round of the candidate.

The candidate child times its reps in small rounds and stops before each (a `pace` message) until the parent
answers. Meanwhile the parent has the problem's reference child (its comparer, alive anyway) time the same
number of reps on the same per-rep inputs, before or after the candidate's round as a secret coin falls. What
disturbs the machine then (another process, a clock change) lands on both sides of a pair, and the speedup is
the median of the per-pair ratios (statistics.paired_ratio) with its interval. The parent, not the candidate's
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

from evaluator.protocol import Go, Pace, Timing, misfits
from evaluator.sandbox.cgroups import FreezeIncomplete
from evaluator.statistics import paired_ratio, tight

MIN_PAIRS = 6  # pairs before the ratio's interval may stop the rounds: the fewest whose extremes are a 95 % interval
MAX_ROUND = 10  # reps of one round (timing_method.ROUND): a pace asking for more was not written by the harness

TimeBlock = Callable[[int, int], "list[float] | str"]  # (first rep, reps) -> the reference's samples, or why not


@dataclass
class Paired:
    """The blocks of both sides, index k of each timed beside the other; what went wrong, if anything."""

    reference: list[list[float]] = field(default_factory=list)
    candidate: list[list[float]] = field(default_factory=list)
    forged: str = ""  # a pace message the harness would not send
    failed: str = ""  # the reference could not be timed (its child died): the ratio falls back to medians
    paused_s: float = 0.0  # the candidate's timed loop waited this long on the parent: not the candidate's time
    reference_wall_s: float = 0.0  # the parent's clock around the reference's blocks (requests and answers included)
    void: list[int] = field(default_factory=list)  # first reps of rounds whose candidate could not be stopped
    unfrozen: str = ""  # why the first void pair was void
    timing: Timing | None = None  # the candidate's samples by the parent's own clock (evaluator.parent.trusted_timing)

    def matches(self, samples: list[float]) -> bool:
        """Whether the rounds are the samples the candidate reported, each with its block or void."""
        return (len(self.reference) + len(self.void) == len(self.candidate)
                and [s for block in self.candidate for s in block] == samples)

    def usable(self, samples: list[float]) -> bool:
        """Whether the paired ratio stands: every round matched by a block timed while the candidate was
        stopped. One void pair voids it: dropping only the void ones would let a candidate that knows its round
        was slow (the coin put the block after it) drop that pair."""
        return not self.failed and not self.void and bool(self.candidate) and self.matches(samples)

    def settled(self, rel_ci: float | None) -> bool:
        """Whether the rounds may stop: a void pair (no ratio will stand: as soon as they may), or enough pairs with
        the median ratio's 95 % interval within +-rel_ci of it."""
        if self.void:
            return True
        if rel_ci is None or len(self.candidate) < MIN_PAIRS or len(self.reference) != len(self.candidate):
            return False
        return tight(*self.ratio(), rel_ci)

    def ratio(self) -> tuple[float, float, float]:
        return paired_ratio(self.reference, self.candidate)

    def overhead_per_rep_s(self) -> float | None:
        """What the reference's blocks took beyond their own samples, per rep, by the parent's clock: a fill of
        fresh inputs, a cache flush and a share of one request's round trip. The candidate's rounds do the same
        around each of its calls; its process cannot change this figure (it is stopped meanwhile)."""
        reps = sum(map(len, self.reference))
        if not reps or self.reference_wall_s <= 0:  # no block clocked: no trusted figure
            return None
        return max(0.0, self.reference_wall_s - sum(map(sum, self.reference)) / 1e3) / reps


class Pacer:
    """Answers a candidate child's `pace` messages (the runner's relay calls it), keeping both sides' blocks."""

    def __init__(self, time_block: TimeBlock, rel_ci: float | None, max_reps: int, on: bool = True):
        self.time_block, self.rel_ci, self.max_reps, self.on = time_block, rel_ci, max_reps, on
        self.hold = contextlib.nullcontext  # what keeps the candidate still while the reference runs (Child.paused)
        self.paired = Paired()
        self._owed: tuple[int, int] | None = None  # a candidate round whose reference block comes after it
        self.ended = False  # the parent said stop: no block is timed after (the device may then serve others)
        self._coin = random.SystemRandom()

    def __call__(self, message: dict) -> Go:
        start = time.monotonic()
        try:
            return self._answer(message)
        finally:
            self.paired.paused_s += time.monotonic() - start

    def _answer(self, message: dict) -> Go:
        if self.ended:
            return self._refuse("a pace message after the parent ended the rounds")
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
        self.ended = not go
        return Go(go=go)

    def _refuse(self, why: str) -> Go:
        self.paired.forged = self.paired.forged or why
        self.ended = True
        return Go(go=False)

    def _time(self, first: int, reps: int) -> None:
        """The reference's block beside the round from rep `first`, timed while the candidate is held; a pair
        whose hold did not take is void: the reference would have run beside the candidate's threads."""
        try:
            with self.hold():
                start = time.monotonic()
                samples = self.time_block(first, reps)
                wall = time.monotonic() - start
        except FreezeIncomplete as exc:
            self.paired.void.append(first)
            self.paired.unfrozen = self.paired.unfrozen or str(exc)
            return
        if isinstance(samples, str):
            self.paired.failed = self.paired.failed or samples
        else:
            self.paired.reference.append(samples)
            self.paired.reference_wall_s += wall

    def _settled(self) -> bool:
        return self.paired.settled(self.rel_ci)
