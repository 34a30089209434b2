"""The candidate role of a child: correctness trials under the kernel watch, the leak check, timing with each
call's outputs snapshotted and glimpsed (the parent chooses which are compared), and the stale-result probe."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import torch

from evaluator import hardware
from evaluator.child import forward_server, leaks, stages, timing, trials, watches
from evaluator.protocol import CandidateRequest, Check, Go, LeakMark, Leaks, Outputs, Pace, Probe, Rep, Stage, Trials
from evaluator.timing_method import ROUND


_SNAPSHOT_SHARE = 0.1  # of the device's memory: what a kept snapshot may take (6.4 GB outputs: one)

class Kept(NamedTuple):
    """A timed call's outputs as the keeper holds them: their snapshot, and what was read of them inside the
    timed window (timing.glimpse; None on CPU)."""

    outputs: list
    seen: list | None

class _Keeper:
    """on_rep hook of the timed loop. Each rep's outputs are snapshotted as soon as its timer stopped (stream-
    ordered on CUDA: work left running on another stream or thread is not in them) and the parent is told
    (`ask`) when the round ends, in one message: it draws, at random and out of this process's reach, which of
    them are compared. The snapshots it chose are kept and handed over after timing, as far as `budget` bytes
    hold them (beyond, at once): handoffs inside the timed loop (a file written, the comparer's work on the
    timing core) timed an identical candidate at 0.87x its reference with a core hogged. The snapshot of
    every rep that may be the last is kept (each replacing the one before) and handed over after timing: a
    candidate that goes wrong at the end is seen too. Snapshots wait only while they fit `budget` bytes
    together, and at most a round's worth (ROUND) where no round is paced; outputs larger than that are
    handed over as they are, never copied (a copy beside a 6.4 GB output ran an H100 out of memory)."""

    def __init__(self, ask, save, label, budget: int):
        self.ask, self.save, self.label, self.budget = ask, save, label, budget
        self.told: list[tuple[int, str, Kept]] = []  # (rep, label, snapshot) not yet asked about
        self.least = 1
        self.chosen: dict[str, Kept] = {}  # snapshots the parent asked for, handed over after timing
        self.held = 0  # their bytes
        self.last: dict[str, Kept] = {}

    def __call__(self, i: int, least: int, checkpoint: bool, out, seen) -> None:
        tensors = trials.as_tensors(out)
        size = trials.nbytes(tensors)
        copied = size <= self.budget
        kept = Kept(trials.snapshot(tensors) if copied else tensors, seen)
        self.told.append((i, self.label(), kept))
        self.least = least
        if checkpoint or not copied or len(self.told) >= ROUND or (len(self.told) + 1) * size > self.budget:
            self._answered()
        if checkpoint and copied:
            self.last = {self.label(): kept}

    def _answered(self) -> None:
        """Ask the parent about the reps held since the last answer, and hand over the ones it chose."""
        told, self.told = self.told, []
        chosen = set(self.ask(told[0][0], len(told), self.least))
        for rep, label, kept in told:
            if rep not in chosen:
                continue
            size = trials.nbytes(kept.outputs)
            if self.held + size <= self.budget:
                self.chosen[label], self.held = kept, self.held + size
            else:
                self.save(kept.outputs, label, kept.seen)

    def take(self) -> dict[str, Kept]:
        """The chosen snapshots and the last, handed over once (the keeper keeps none of them)."""
        taken, self.chosen, self.last, self.held = self.chosen | self.last, {}, {}, 0
        return taken

def _snapshot_budget(device: str) -> int:
    return int(_SNAPSHOT_SHARE * hardware.device_memory(device))

def _probe(req: CandidateRequest, model, problem, fresh: trials.FreshInputs, changed: bool, kept: dict[str, Kept],
           save, handed: set[str]) -> Probe:
    """The last timed call's outputs (unless already handed over), then one more call after fresh data was
    written into the same input tensors."""
    device = req.device
    stages.sync(device)()
    inputs, changed = fresh.inputs, changed or fresh.changed()
    outputs = {label: save(held.outputs, label, held.seen) for label, held in kept.items() if label not in handed}
    kept.clear()
    trials.refill(inputs, problem, req.verify_seed, device)
    with torch.no_grad():
        value = model(*inputs)
    stages.sync(device)()
    outputs["verify"] = save(trials.as_tensors(value), "verify")
    return Probe(outputs=outputs, inputs_changed=changed)

def _pacer(chan: stages.Channel, requests):
    """The candidate's timed rounds, paced by the parent (evaluator/verdict/pacing.py): before each round it times the
    reference beside the last one, and says whether to go on."""
    def pace(at: timing.Pace) -> bool:
        message = Pace(which=at.first, reps=at.reps, last_round=at.last_round, least=at.least)
        return Go.model_validate_json(stages.ask_parent(chan, requests, message, "it timed the reference")).go
    return pace

def _handoff(chan: stages.Channel, requests, req: CandidateRequest):
    """The candidate's saver: each call's outputs go to the comparer, and the child waits until they are judged."""
    def send(label: str, outputs: list[dict]) -> None:
        stages.ask_parent(chan, requests, Outputs(which=label, outputs=outputs), "the outputs were judged")
    return trials.handoff(Path(req.out_dir), req.device, send)

def _asker(chan: stages.Channel, requests):
    """After a round of timed calls: which of them the parent wants handed over."""
    def ask(first: int, reps: int, least: int) -> list[int]:
        message = Rep(which=first, reps=reps, least=least)
        return Check.model_validate_json(stages.ask_parent(chan, requests, message, "it chose the checks")).checked
    return ask

def _marker(chan: stages.Channel, requests, device: str):
    """The leak check's marks on a GPU: the child waits at each while the parent reads its device memory."""
    def mark(which: int) -> None:
        if device == "cuda":
            stages.ask_parent(chan, requests, LeakMark(which=which), "it read the device memory")
    return mark

def run(chan: stages.Channel, req: CandidateRequest, model, problem, watch: watches.Watch, requests,
        check) -> None:
    """Correctness (watched), the kernels it showed, leak check, timing with output snapshots, and a stale-result
    probe. A kernel that does not compile for a GPU (an interpreted body that is not Triton) ends the run there."""
    device = req.device
    save, pace = _handoff(chan, requests, req), _pacer(chan, requests)
    mark, ask = _marker(chan, requests, device), _asker(chan, requests)
    chan.send(Stage(stage="correctness"))
    report = trials.run_trials(model, problem, req.seeds, device, save, stages.sync(device), watch)
    chan.send(Trials(trials=report))
    check("correctness")
    kernels = watch.report()
    chan.send(kernels)
    if kernels.not_compiled:
        return
    inputs = trials.make_inputs(problem, req.timing_seed, device)
    fresh = trials.FreshInputs(inputs, problem, req.timing_seed, device)
    call = lambda: model(*inputs)  # noqa: E731
    chan.send(Stage(stage="leak"))
    fastest = min((t["call_ms"] for t in report.values()), default=0.0)
    growth, calls = leaks.measure_growth(call, device, req.leak_calls, fastest, mark)
    chan.send(Leaks(growth=growth, calls=calls))
    check("leak")
    if req.timing.enabled and req.exchange:
        chan.send(Probe(outputs={}, inputs_changed=fresh.changed()))  # by the leak check's calls
        chan.send(Stage(stage="timing"))  # by the parent from here on (evaluator.parent.trusted_timing)
        forward_server.serve(chan, requests, forward_server.Server(Path(req.exchange), lambda given: model(*given)))
        check("serving")  # its last check: the dispatcher is read too
    elif req.timing.enabled:
        changed = fresh.changed()  # by the leak check's calls: the fills below overwrite the inputs
        handed: set[str] = set()

        def hand(tensors: list, label: str, seen: list | None) -> None:
            handed.add(label)
            save(tensors, label, seen)
        keeper = _Keeper(ask, hand, fresh.label, _snapshot_budget(device))
        stages.time_model(chan, req, stages.timed_call(call), fresh, on_rep=keeper, pace=pace if req.timing.paired else None)
        check("timing")
        chan.send(Stage(stage="probe"))
        chan.send(_probe(req, model, problem, fresh, changed, keeper.take(), save, handed))
        check("probe")
    stages.send_memory(chan, device)
