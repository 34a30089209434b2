"""Untimed stages of several candidates on one device at once, timed stages alone.

A candidate that finds its device held by another may run its untimed stages (load, correctness trials, leak
check) beside the holder, as a sharer, where EvalSettings.untimed_share allows; it takes the device itself, as
any candidate does, before anything of it is timed. While anything is timed on a device (a candidate beside its
reference, a problem's reference timing itself) every sharer of that device is frozen (its cgroup, else its
process group, waited for until every thread stopped), and none of their requests to kforge is in flight: a
comparison a sharer asked for finishes first, a new one waits. Frozen seconds are added to the frozen
children's budgets. A sharer that cannot be frozen is killed: its run fails, and a failure while sharing is
judged again alone (evaluator.parent.runner). Sharing never crosses kforge processes: the device lease stays
taken while this batch's sharers run, even between two holders."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from typing import Callable, Iterator

from evaluator.sandbox.cgroups import FreezeIncomplete
from evaluator.sandbox.spawn import Child

_log = logging.getLogger(__name__)


class Sharer:
    """One candidate's children while it runs untimed beside the holder of `device`. `since`: when it was
    admitted; `beside_s` adds up the seconds it shared."""

    def __init__(self, device: str | None, label: str):
        self.device, self.label, self.children = device, label, []
        self.since, self.beside_s = time.monotonic(), 0.0


class Sharing:
    """Per device: the sharers admitted (at most `slots - 1` beside its holder), whether something is timed there,
    and how many of its sharers' requests are in flight."""

    def __init__(self, slots: int):
        self.slots = slots
        self._changed = threading.Condition()
        self._sharers: dict[str | None, list[Sharer]] = {}
        self._timed: set[str | None] = set()
        self._busy: Counter = Counter()

    def admit(self, device: str | None, label: str, fits: Callable[[], bool] = lambda: True) -> Sharer | None:
        """A sharer of `device`, if a slot is free, nothing is timed there and `fits()` says its memory has room."""
        with self._changed:
            there = self._sharers.setdefault(device, [])
            if len(there) + 1 >= self.slots or device in self._timed or not fits():
                return None
            sharer = Sharer(device, label)
            there.append(sharer)
        _log.debug("sharing %s: %s runs untimed beside its holder", device, label)
        return sharer

    def leave(self, sharer: Sharer) -> None:
        """The sharer took the device itself or ended."""
        with self._changed:
            if sharer in self._sharers.get(sharer.device, []):
                self._sharers[sharer.device].remove(sharer)
                sharer.beside_s += time.monotonic() - sharer.since
                self._changed.notify_all()
        _log.debug("sharing %s: %s leaves", sharer.device, sharer.label)

    def active(self, device: str | None) -> bool:
        with self._changed:
            return bool(self._sharers.get(device))

    @contextlib.contextmanager
    def request(self, sharer: Sharer | None) -> Iterator[None]:
        """A sharer's request to kforge (a comparison, a child spawned for it): never while its device is timed,
        and a timed section begins only once it is done. A holder's own requests pass."""
        if sharer is None:
            yield
            return
        with self._changed:
            while sharer.device in self._timed:
                self._changed.wait(timeout=0.25)
            self._busy[sharer.device] += 1
        try:
            yield
        finally:
            with self._changed:
                self._busy[sharer.device] -= 1
                self._changed.notify_all()

    def adopt(self, sharer: Sharer | None, child: Child) -> None:
        """`child` is the sharer's: frozen with it from now on (call within `request`, or while nothing is timed)."""
        if sharer is not None:
            with self._changed:
                if child not in sharer.children:
                    sharer.children.append(child)

    def pause(self, device: str | None, timed: str) -> Callable[[], None]:
        """Something is timed on `device` from now on (`timed` says what): no sharer request in flight, every
        sharer's children frozen. Returns the call that lets them go on."""
        with self._changed:
            self._timed.add(device)
            while self._busy[device]:
                self._changed.wait(timeout=0.25)
            children = [(s, c) for s in self._sharers.get(device, []) for c in s.children if c.proc.poll() is None]
        frozen = [child for sharer, child in children if _frozen(child, sharer, timed)]
        started = time.monotonic()
        if frozen:
            _log.debug("sharing %s: %s timed, %d children of sharers frozen: %s", device, timed, len(frozen),
                       [child.proc.pid for child in frozen])

        def resume() -> None:
            _log.debug("sharing %s: %s timed, done", device, timed)  # said while its sharers still stand still
            for child in frozen:
                child.thaw(time.monotonic() - started)
            with self._changed:
                self._timed.discard(device)
                self._changed.notify_all()
        return resume

    @contextlib.contextmanager
    def timed(self, device: str | None, timed: str) -> Iterator[None]:
        resume = self.pause(device, timed)
        try:
            yield
        finally:
            resume()


def _frozen(child: Child, sharer: Sharer, timed: str) -> bool:
    """Freeze one sharer's child; one whose processes do not all stop is killed instead (its run fails, and is
    judged again alone), so nothing of it runs beside what is timed."""
    try:
        child.freeze()
        return True
    except FreezeIncomplete as exc:
        _log.warning("%s could not be frozen while %s was timed (%s): stopped", sharer.label, timed, exc)
        child.kill()
        return False
