"""Where a batch's device time goes: every take and give-back of a device, and every child's messages, on the
parent's clock; then, per device, how much of the wall it was held, and which steps inside the holds took it.

Used by benchmarks/kernelbench_throughput.py (--trace FILE). A step is the time from one message of a child to the
next (the first from the request), named for the message that ends it ("stage:timing", "outputs:trial_1",
"ready"). Steps count only while a device was held (any device: meant for a batch on one GPU), so the loads that run
beside another candidate's hold do not show. `hold_parts_s` splits each hold, on any number of GPUs, into the
reference's wait for quiet and its timing, the candidate's stages and its exit, each child placed on the device its
gate gave it; `load_s`: children's loads (spawn to `loaded`), which run outside the holds; per device its time held
and its gaps between holds; `awaited_loads`: the children a device waited for to load.
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
    """Records while entered: Batch.take_or_share (a take, or a share beside the holder) / give_back, a reference
    joining a held device (Batch.join), and each Child's messages as it finishes."""

    def __init__(self):
        self.holds: list[tuple[float, str, str, str]] = []  # (t, take|share|give, device, thread)
        self.children: list[dict] = []
        self._lock = threading.Lock()

    def __enter__(self) -> "Trace":
        self._take, self._give, self._join, self._finish = Batch.take_or_share, Batch.give_back, Batch.join, Child.finish
        self._begin, self._devices = Child.begin, {}
        trace = self

        def begin(child, request, gate=None):
            def gated():
                trace._devices[id(child)] = gpu = gate()
                return gpu
            return trace._begin(child, request, gated if gate else None)

        def take_or_share(batch, want=None, joined=False, *args, **kwargs):
            device, sharer = trace._take(batch, want, joined, *args, **kwargs)
            trace._hold("share" if sharer else "take", device)  # take_device comes through here too
            return device, sharer

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

        Batch.take_or_share, Batch.give_back, Batch.join, Child.finish = take_or_share, give_back, join, finish
        Child.begin = begin
        return self

    def __exit__(self, *exc) -> None:
        Batch.take_or_share, Batch.give_back, Batch.join, Child.finish = self._take, self._give, self._join, self._finish
        Child.begin = self._begin

    def _hold(self, op: str, device) -> None:
        with self._lock:
            self.holds.append((time.monotonic(), op, str(device), threading.current_thread().name))

    def _child(self, child: Child, result) -> None:
        steps = [(m["_t"], f"{m.get('event')}:{m.get('stage') or m.get('which') or ''}".rstrip(":"))
                 for m in result.messages if "_t" in m]
        with self._lock:
            self.children.append({"dir": str(result.log_path.parent), "spawned": result.spawned,
                                  "started": result.started, "steps": steps,
                                  "gpu": str(self._devices.pop(id(child), None))})

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
                     "joins": sum(op == "join" and on == device for _, op, on, _ in self.holds), **_gaps(spans)}
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
        out["hold_parts_s"], out["load_s"] = hold_parts(intervals, self.children), loads(self.children)
        out["awaited_loads"] = awaited(self.children)
        return out


# A hold's parts: (name, from, to), each a step of the reference (ref:) or the candidate (cand:), or the hold's own
# take and give; "cand:started" is when the candidate's request went out
_PARTS = (("quiet", "take", "ref:stage:timing"), ("reference_timing", "ref:stage:timing", "ref:ready"),
          ("setup", "cand:started", "cand:stage:correctness"), ("correctness", "cand:stage:correctness", "cand:stage:leak"),
          ("leak", "cand:stage:leak", "cand:stage:timing"), ("timing_setup", "cand:stage:timing", "cand:stage:timed"),
          ("timed", "cand:stage:timed", "cand:timing:model"), ("probe", "cand:stage:probe", "cand:probe"),
          ("final_check", "cand:probe", "cand:done"), ("exit", "cand:done", "give"))


def _first(child: dict, step: str) -> float | None:
    return child["started"] if step == "started" else next((t for t, name in child["steps"] if name == step), None)


def hold_parts(intervals: dict[str, list[tuple[float, float]]], children: list[dict]) -> dict:
    """Per part of a hold (_PARTS), its median and its sum over the holds that had one reference timed and one
    candidate run inside them, on any device (on CUDA, every hold; CPU's process pairs put several of each in one
    hold, which are not split); `holds`: how many such holds there were."""
    parts: dict[str, list[float]] = defaultdict(list)
    counted = 0
    for device, spans in intervals.items():
        mine = [c for c in children if c.get("gpu") == device and c["started"]]
        for take, give in spans:
            def inside(step: str, reference: bool) -> list[dict]:
                return [c for c in mine if ("/ref/" in c["dir"]) == reference
                        and take - 0.01 <= (_first(c, step) or -1.0) <= give]
            refs, cands = inside("stage:timing", True), inside("started", False)
            if len(refs) != 1 or len(cands) != 1:
                continue
            counted += 1
            at = {"take": take, "give": give}
            for name, start, end in _PARTS:
                a, b = (at.get(x) or _first(refs[0] if x.startswith("ref:") else cands[0], x.split(":", 1)[1])
                        for x in (start, end))
                if a is not None and b is not None:
                    parts[name].append(b - a)
    summary = {name: {"median": round(statistics.median(v), 3), "sum": round(sum(v), 1)} for name, v in parts.items()}
    return {"holds": counted, **summary}


def loads(children: list[dict]) -> dict:
    """Median seconds from spawn to `loaded`, for reference children and candidates apart."""
    out = {}
    for role in ("reference", "candidate"):
        spans = [t - c["spawned"] for c in children if ("/ref/" in c["dir"]) == (role == "reference")
                 for t in [_first(c, "loaded")] if t is not None and c["spawned"]]
        if spans:
            out[role] = round(statistics.median(spans), 3)
    return out


def _gaps(spans: list[tuple[float, float]]) -> dict:
    """A device's time held, and its idle time between holds: in all, and in gaps of more than 0.3 s (a child's
    load or more, which nothing had started ahead)."""
    spans = sorted(spans)
    gaps = [b[0] - a[1] for a, b in zip(spans, spans[1:])]
    return {"held_s": round(sum(b - a for a, b in spans), 1), "gaps_s": round(sum(gaps), 1),
            "gaps_over_0_3_s": sum(g > 0.3 for g in gaps)}


def awaited(children: list[dict]) -> dict:
    """Per device, the reference and candidate children whose request went out within 50 ms of their `loaded`: the
    device waited for their load (a child started ahead loads long before its turn); and spare references never
    asked (started for a problem that then ran elsewhere)."""
    out: dict[str, dict[str, int]] = {"references": defaultdict(int), "candidates": defaultdict(int)}
    unused = 0
    for child in children:
        reference = "/ref/" in child["dir"]
        if not reference and not child["dir"].split("/")[-1].startswith("cand"):
            continue  # a compile child, or introspection
        loaded = _first(child, "loaded")
        if reference and (not child["started"] or child["started"] < child["spawned"]):
            unused += 1
        elif loaded is not None and child["started"] and child["started"] - loaded < 0.05:
            out["references" if reference else "candidates"][str(child.get("gpu"))] += 1
    return {role: dict(counts) for role, counts in out.items()} | {"spares_never_asked": unused}


def _overlap(a: float, b: float, spans: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(b, hi) - max(a, lo)) for lo, hi in spans)
