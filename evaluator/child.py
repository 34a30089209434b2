"""Entry point of an evaluator child process: `python -m evaluator.child REQUEST_FD RESULT_FD`.

Roles: `compile` (import the candidate, which builds it), `candidate` (correctness, leaks, timing of ModelNew),
`reference` (the problem's Model: reference outputs and baseline timings, in a process no candidate touched).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

import torch

from evaluator import hardware, leaks, loading, timing, trials


class Channel:
    """The private result pipe. JSON lines; the parent ignores anything the child prints."""

    def __init__(self, fd: int):
        self._fh = os.fdopen(fd, "w", buffering=1)

    def send(self, event: str, **data) -> None:
        self._fh.write(json.dumps({"event": event, **data}, default=str) + "\n")


def _strict_fp32() -> None:
    """Judge in true fp32: TF32 would give the reference (or candidate) a silent 1e-3 error."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def _environment(device: str) -> dict:
    return {"device_name": hardware.device_name(device), "torch_version": torch.__version__, "cuda_version": torch.version.cuda}


def _sync(device: str):
    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def _bench(call, req: dict) -> list[float]:
    t = req["timing"]
    return timing.bench(call, req["device"], t["warmup_ms"], t["rep_ms"], t["min_reps"], t["max_reps"])


def _run_model(chan: Channel, req: dict, model, problem) -> None:
    """Correctness trials, then (candidate only) leak check, then timing, on one input set per stage."""
    device, out_dir = req["device"], Path(req["out_dir"])
    chan.send("stage", stage="correctness")
    report = trials.run_trials(model, problem, req["trial_seeds"], device, out_dir, _sync(device))
    chan.send("trials", trials=report)
    inputs = trials.make_inputs(problem, req["timing_seed"], device)
    call = lambda: model(*inputs)  # noqa: E731
    if req["role"] == "candidate":
        chan.send("stage", stage="leak")
        chan.send("leaks", growth=leaks.measure_growth(call, device, req["leak_calls"]))
    if req["timing"]["enabled"]:
        chan.send("stage", stage="timing")
        with torch.no_grad():
            chan.send("timing", which="model", samples=_bench(call, req))
            if req.get("compile_baseline"):
                compiled = torch.compile(model)
                chan.send("timing", which="compiled", samples=_bench(lambda: compiled(*inputs), req))
    if device == "cuda":
        chan.send("memory", peak_cuda_allocated=torch.cuda.max_memory_allocated(), host_rss=leaks.rss())


def _serve(chan: Channel, req: dict) -> None:
    device = req["device"]
    _strict_fp32()
    if device == "cpu":
        torch.set_num_threads(req["cpu_threads"])  # reference and candidate get the same cores
    chan.send("env", **_environment(device))
    problem = loading.load_problem(Path(req["problem_path"]), req["overrides"])
    if req["role"] == "reference":
        model = trials.build_model(problem.Model, problem, req["init_seed"], device)
        return _run_model(chan, req, model, problem)
    chan.send("stage", stage="compile")
    module, seconds, cached = loading.load_candidate(Path(req["candidate_path"]), Path(os.environ["TORCH_EXTENSIONS_DIR"]))
    chan.send("compiled", seconds=seconds, cache_hit=cached)
    if req["role"] == "candidate":
        chan.send("stage", stage="init")
        model = trials.build_model(module.ModelNew, problem, req["init_seed"], device)
        _run_model(chan, req, model, problem)


def main() -> None:
    request_fd, result_fd = int(sys.argv[1]), int(sys.argv[2])
    with os.fdopen(request_fd, "rb") as fh:
        req = json.loads(fh.read())
    chan = Channel(result_fd)
    try:
        _serve(chan, req)
    except BaseException as exc:  # noqa: BLE001 - every failure of candidate code is a verdict, not a crash
        chan.send("error", exc_type=type(exc).__name__, message=str(exc)[-4000:], traceback=traceback.format_exc()[-6000:])
        sys.stdout.flush()
        os._exit(1)
    chan.send("done")
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: a candidate's broken CUDA context must not hang the exit


if __name__ == "__main__":
    main()
