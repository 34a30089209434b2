"""The reference role of a child: the problem's Model in a process no candidate touched, its outputs for every
seed a candidate will see, its baseline timings, then the comparer of the problem's candidates."""

from __future__ import annotations

from pathlib import Path

import torch

from evaluator.child import comparer, stages, trials
from evaluator.child.cuda_fills import CudaFills
from evaluator.child.fills import Fills
from evaluator.protocol import Quiet, ReferenceRequest, Ready, Stage, Timing, Trials


def _footprint(device: str, expected: comparer.Expected) -> int:
    if device != "cuda":
        return expected.held
    torch.cuda.empty_cache()  # what stays reserved is what the comparer holds while candidates run
    return torch.cuda.memory_reserved()

def run_reference(chan: stages.Channel, req: ReferenceRequest, model, problem, requests) -> None:
    """Reference outputs for every seed the candidate will see (kept on the device as far as the budget goes),
    baseline timings, then serve as the comparer of this problem's candidates until told to close."""
    device = req.device
    expected = comparer.Expected(model, problem, dict(req.seeds), device, req.resident_bytes)
    chan.send(Stage(stage="correctness"))
    report = trials.run_trials(model, problem, req.seeds, device, expected.keep, stages.sync(device))
    chan.send(Trials(trials=report))
    timer = None
    if req.timing.enabled:
        chan.send(Stage(stage="quiet"))  # its outputs made (perhaps beside another candidate): the device alone next
        stages.ask_parent(chan, requests, Quiet(), "the device was quiet")
        inputs = trials.make_inputs(problem, req.timing_seed, device)
        fresh = trials.FreshInputs(inputs, problem, req.timing_seed, device)  # timed as the candidate is
        expected.timed = fresh
        timer = comparer.Timer(stages.timed_call(lambda: model(*inputs)), fresh, device)  # and beside each round
        stages.time_model(chan, req, timer.call, fresh)
        if req.compile_baseline:
            compiled = torch.compile(model)
            chan.send(Timing(which="compiled", samples=stages.bench_model(stages.timed_call(lambda: compiled(*inputs)), req, fresh=fresh)))
            del compiled
    chan.send(Stage(stage="footprint"))
    stages.send_memory(chan, device)
    fills = (CudaFills if device == "cuda" else Fills)(Path(req.exchange), problem, expected.seed_of, device) \
        if req.exchange else None
    judge = comparer.Comparer(expected, req.atol, req.rtol, timer, fills)
    audit = judge.audit() if req.audit else []
    chan.send(Stage(stage="serving"))
    chan.send(Ready(footprint=_footprint(device, expected), audit=audit))
    comparer.serve(chan, requests, judge)
