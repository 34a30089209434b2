"""One candidate's hold of a device of the batch: taken for its whole run, or shared for its untimed stages beside
another candidate's hold and taken before anything of it is timed (evaluator.parent.sharing)."""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterator, TypeVar

from evaluator.parent.batch import BESIDE_SHARE, Batch
from evaluator.parent.sharing import Sharer
from evaluator.sandbox import gpumemory
from evaluator.sandbox.spawn import Child

T = TypeVar("T")
SHARER_FOOTPRINTS = 3  # a sharer is let in where the device has room for this many of its reference's footprint


class Hold:
    """One device of the batch for one candidate: taken when a child of it calls the hold (its gate, `want`: the
    GPU where the candidate's comparer lives) and kept until the candidate ends, or until `release` while nothing
    of it runs on the device. On CUDA a child loads (interpreter and torch, seconds) before it asks; on CPU the
    device is held from the start, so that no load slows another child's timed run. `waited_s`: the seconds its
    takes waited for other kforge processes (the verdict's `device_wait`). `beside`: its reference runs beside
    another candidate's last stages (`join`) and takes the device next. `share`: its gate (`enter`) may place it
    beside the device's holder (`sharer`) until it takes the device itself; `shared` says whether it ever did."""

    def __init__(self, batch: Batch, share: str = ""):
        self.batch, self.device, self.held, self.beside, self.waited_s = batch, None, False, False, 0.0
        self.share = share if batch.sharing.slots > 1 else ""
        self.sharer: Sharer | None = None
        self.shared, self.beside_s = False, 0.0  # whether it ever shared; the seconds it did
        if batch.settings.device == "cpu":
            self.enter(None)

    def __call__(self, want: str | None = None) -> str | None:
        """The device, held: taken now if it is not (a sharer waits for its holder to end; that wait is added to
        its children's budgets)."""
        if not self.held:
            start = time.monotonic()
            self._taken(self.batch.take_device(want, joined=self.beside, first=self.sharer is not None))
            self.beside = False
            if self.sharer is not None:
                for child in self.sharer.children:
                    child.excused_s += time.monotonic() - start
                self._unshare()
        return self.device

    def enter(self, want: str | None, footprint: int = 0) -> str | None:
        """The device for this candidate's untimed stages: taken where it is free, else shared beside its holder
        where sharing admits it (on CUDA only with room for SHARER_FOOTPRINTS x `footprint` bytes there)."""
        if self.held or self.sharer is not None:
            return self.device
        if not self.share:
            return self(want)
        need = SHARER_FOOTPRINTS * footprint
        fits = (lambda device: True) if self.batch.settings.device == "cpu" else \
            (lambda device: gpumemory.room(device, BESIDE_SHARE) >= need)
        device, self.sharer = self.batch.take_or_share(want, self.beside, self.share, fits)
        if self.sharer is None:
            self._taken(device)
            self.beside = False
        else:
            self.device, self.shared = device, True
        return device

    @property
    def on(self) -> str | None:
        """The device it runs on now, held or shared; None before either."""
        return self.device if self.held or self.sharer is not None else None

    def _taken(self, device: str | None) -> None:
        self.device, self.held = device, True
        self.waited_s += self.batch.device_wait_s(device)

    def join(self, want: str | None, room: int) -> tuple[str | None, bool]:
        """The device for the untimed work of this candidate's reference (trusted: the problem's own code), which
        will hold `room` bytes, and whether that is beside the holder of `want` in its last stages (Batch.join);
        else it is held. The reference calls the hold itself before it times anything."""
        if self.held or want is None or self.batch.settings.device == "cpu":
            return self(want), False
        if self.batch.join(want, room):
            self._taken(want)
        else:
            self.device, self.beside = want, True
        return want, self.beside

    @contextlib.contextmanager
    def untimed(self) -> Iterator[None]:
        """A request of a sharer (a comparison, a child spawned): never while its device is timed."""
        with self.batch.sharing.request(self.sharer):
            yield

    def spawned(self, make: Callable[[], Child]) -> Child:
        """A child of this candidate, made and, while it shares, frozen with it whenever its device is timed."""
        with self.untimed():
            child = make()
            self.batch.sharing.adopt(self.sharer, child)
        return child

    def adopt(self, *children: Child | None) -> None:
        """Children made before it shared (loaded ahead), frozen with it from now on."""
        with self.untimed():
            for child in children:
                if child is not None:
                    self.batch.sharing.adopt(self.sharer, child)

    def release(self) -> None:
        """Give the device back (CUDA only) while this candidate's next child still loads: the reference it ran
        is ready, and another loaded child may use the device meanwhile."""
        if self.held and self.batch.settings.device != "cpu":
            self.batch.give_back(self.device)
            self.held = False

    def end(self) -> None:
        """The candidate's run ended: its device given back if held, its place beside another left."""
        if self.held:
            self.batch.give_back(self.device)
        elif self.beside:  # its reference failed or the batch stopped before it took the device
            self.batch.leave_beside(self.device)
        if self.sharer is not None:
            self._unshare()

    def _unshare(self) -> None:
        self.batch.unshare(self.sharer)
        self.beside_s += self.sharer.beside_s
        self.sharer = None


def on_free_device(batch: Batch, run: Callable[[Hold], T], share: str = "") -> tuple[T, Hold]:
    """run(hold), then the device given back if held; also the hold (the device it last ran on, its waits).
    `share`: the candidate's name, where its untimed stages may share the device (Hold.enter)."""
    hold = Hold(batch, share)
    try:
        return run(hold), hold
    finally:
        hold.end()
