"""Where a batch's device time goes: every take and give-back of a device, and every child's messages, on the
parent's clock; then, per device, how much of the wall it was held, and which steps inside the holds took it.

Used by benchmarks/kernelbench_throughput.py (--trace FILE). A step is the time from one message of a child to the
next (the first from the request), named for the message that ends it ("stage:timing", "outputs:trial_1",
"ready"). Steps count only while a device was held (any device: meant for a batch on one GPU), so the loads that run
beside another candidate's hold do not show.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections import defaultdict
from pathlib import Path

from evaluator.parent.batch import Batch
from evaluator.sandbox.spawn import Child


class Trace:
    """Records while entered: Batch.take_device / give_back, a reference joining a held device (Batch.join), and
    each Child's messages as it finishes."""

    def __init__(self):
        self.holds: list[tuple[float, str, str, str]] = []  # (t, take|give, device, thread)
        self.children: list[dict] = []
        self._lock = threading.Lock()

    def __enter__(self) -> "Trace":
        self._take, self._give, self._join, self._finish = Batch.take_device, Batch.give_back, Batch.join, Child.finish
        trace = self

        def take_device(batch, want=None, joined=False):
            device = trace._take(batch, want, joined)
            trace._hold("take", device)
            return device

        def join(batch, want, room):
            taken = trace._join(batch, want, room)
            if not taken:  # a reference beside the holder (a take is recorded as one)
                trace._hold("join", want)
            return taken

        def give_back(batch, device):
            trace._hold("give", device)
            trace._give(batch, device)

        def finish(child, wait=True):
            result = trace._finish(child, wait)
            trace._child(child, result)
            return result

        Batch.take_device, Batch.give_back, Batch.join, Child.finish = take_device, give_back, join, finish
        return self

    def __exit__(self, *exc) -> None:
        Batch.take_device, Batch.give_back, Batch.join, Child.finish = self._take, self._give, self._join, self._finish

    def _hold(self, op: str, device) -> None:
        with self._lock:
            self.holds.append((time.monotonic(), op, str(device), threading.current_thread().name))

    def _child(self, child: Child, result) -> None:
        steps = [(m["_t"], f"{m.get('event')}:{m.get('stage') or m.get('which') or ''}".rstrip(":"))
                 for m in result.messages if "_t" in m]
        with self._lock:
            self.children.append({"dir": str(result.log_path.parent), "spawned": result.spawned,
                                  "started": result.started, "steps": steps})

    def write(self, path: Path) -> None:
        path.write_text(json.dumps({"holds": self.holds, "children": self.children}))

    def report(self) -> dict:
        """Per device: the share of the traced wall it was held, holds and their median length; the steps inside
        holds by total seconds (the 15 largest), apart for reference children and candidates."""
        if not self.holds:
            return {}
        start, end = self.holds[0][0], self.holds[-1][0]
        intervals: dict[str, list[tuple[float, float]]] = defaultdict(list)
        opened: dict[str, float] = {}
        for t, op, device, _ in self.holds:
            if op == "take":
                opened[device] = t
            elif op == "give" and device in opened:
                intervals[device].append((opened.pop(device), t))
        held = [span for spans in intervals.values() for span in spans]
        out = {"wall_s": round(end - start, 2), "devices": {
            device: {"held_fraction": round(sum(b - a for a, b in spans) / max(end - start, 1e-9), 3),
                     "holds": len(spans), "median_hold_s": round(statistics.median(b - a for a, b in spans), 3),
                     "joins": sum(op == "join" and on == device for _, op, on, _ in self.holds)}
            for device, spans in intervals.items() if spans}}
        for role in ("reference", "candidate"):
            totals: dict[str, float] = defaultdict(float)
            for child in self.children:
                if ("/ref/" in child["dir"]) != (role == "reference") or not child["started"]:
                    continue
                before = child["started"]
                for t, name in child["steps"]:
                    if t > before:
                        totals[name] += _overlap(before, t, held)
                        before = t
            top = sorted(totals.items(), key=lambda item: -item[1])[:15]
            out[f"{role}_steps_held_s"] = {name: round(seconds, 2) for name, seconds in top}
        return out


def _overlap(a: float, b: float, spans: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(b, hi) - max(a, lo)) for lo, hi in spans)
