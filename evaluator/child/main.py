"""Entry point of an evaluator child process: `python -m evaluator.child.main REQUEST_FD RESULT_FD`.

Roles: `compile` (import the candidate, which builds it), `candidate` (correctness, leaks, timing of ModelNew),
`reference` (the problem's Model: reference outputs and baseline timings, in a process no candidate touched; it
then stays as the comparer of the problem's candidates' outputs), `serve` (the problem's Model as a forward server,
timed beside a candidate by the parent), `introspect` (problem files' bytes and FLOPs,
evaluator.child.introspect), `profile` (a correct candidate's forward calls for Nsight Compute, evaluator.parent.profiling). The request and every message are models of evaluator.protocol.
The candidate role also watches the candidate: which extensions it builds and calls, which Triton kernels it
defines and launches (watches.py), and whether it tampers with the harness (guard.py).
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import sys
import traceback
from pathlib import Path

import torch

from evaluator import hardware, languages
from evaluator.build import lean_headers, nvcc_driver, precompiled
from evaluator.child import candidate, forward_server, guard, introspect, loading, reference, stages, trials, watches
from evaluator.protocol import (CandidateRequest, Cheat, Compiled, Done, Env, Error, IntrospectRequest, Loaded,
                                Profiled, ProfileRequest, ReferenceRequest, Request, ServeRequest, Stage, WARM_GPU,
                                read_request)
from evaluator.sandbox import jail, seccomp


def _strict_fp32() -> None:
    """Judge in true fp32: TF32 would give the reference (or candidate) a silent 1e-3 error."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (glibc's malloc.h)

def _steady_malloc() -> None:
    """Fix glibc malloc's thresholds, which otherwise adapt at run time: in some processes a call's megabyte-sized
    temporaries came from fresh mmap'd pages every call (~1000 page faults per call, 16-20 ms) and in others from
    the reused heap (0.5 ms), for the same eager code: bimodal CPU speedups. Blocks up to glibc's
    largest threshold (32 MiB) now always come from the heap, and freed memory is not handed back to the kernel
    (a leak still grows in both leak windows). Both roles, so reference and candidate allocate alike."""
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # not glibc (musl): its malloc does not adapt
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, 32 * 2**20)
        mallopt(_M_TRIM_THRESHOLD, 2**30)

def _jail_layers() -> dict[str, str]:
    return json.loads(os.environ.get("KFORGE_JAIL") or '{"jail": "off: not started in the jail"}')

def _own_network() -> bool:
    """Whether the jail gave this child a network namespace of its own (the profile variant, evaluator/sandbox/jail.py):
    only then may its seccomp filter allow IPv4/IPv6 sockets (ncu's injection talks to ncu over loopback)."""
    return _jail_layers().get("network", "").startswith("on")

def _environment(device: str, confined: bool) -> Env:
    layers = _jail_layers()
    layers["seccomp"] = ("on (IPv4/IPv6 sockets allowed: its own network namespace)" if _own_network() else "on") \
        if confined else "off: not x86-64, or not permitted"
    return Env(device_name=hardware.device_name(device), torch_version=torch.__version__,
               cuda_version=torch.version.cuda, confined=confined, sandbox=layers)

def _pin(gpu: str | None) -> None:
    """The device comes with the request (the child may have started before one was free), unless the child was
    started for its problem's GPU (_warm_cuda), which must be the one given. CUDA reads the variable when it
    initialises, which nothing else in this process may have done."""
    if gpu is None:
        return
    warmed = os.environ.get(WARM_GPU)
    if warmed is not None and warmed != gpu:
        raise RuntimeError(f"kforge: the child was started for GPU {warmed} but given GPU {gpu}")
    if warmed is None:
        if torch.cuda.is_initialized():
            raise RuntimeError("kforge: CUDA was initialised before the child's GPU was pinned")
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu

def _warm_cuda() -> None:
    """A child started for its problem's GPU (evaluator/parent/batch.py sets WARM_GPU) initialises CUDA and makes its
    context before it says `loaded`, while another child holds the GPU: ~0.3 s on the H100
    (benchmarks/cuda_start_cost.py), paid ten times by the seeds and repairs while holding it. No kernel runs.
    Its context grows the device's used memory inside the running candidate's leak windows, which is why this
    is done only where the leak check reads each candidate's own processes (evaluator.sandbox.gpumemory)."""
    gpu = os.environ.get(WARM_GPU)
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
        torch.cuda.init()
        torch.cuda.synchronize()  # the context itself

def _serve(chan: stages.Channel, req: Request, confined: bool, requests) -> None:
    chan.send(Stage(stage="setup"))  # the request is in: what the child loaded before it is the parent's `start`
    if _own_network() and not isinstance(req, ProfileRequest):
        raise RuntimeError(f"kforge: a {req.role} child must not run in the profile jail (its network is open)")
    trials.set_precision(req.precision)  # before any problem or candidate code, and before the guard holds it
    if isinstance(req, IntrospectRequest):
        chan.send(_environment("cpu", confined))
        return _run_introspect(chan, req)
    device = req.device
    _pin(req.gpu)
    _strict_fp32()
    if device == "cpu":
        torch.set_num_threads(req.cpu_threads)  # reference and candidate get the same cores
        _steady_malloc()
    chan.send(_environment(device, confined))
    problem = loading.load_problem(Path(req.problem_path), req.overrides)
    if isinstance(req, ReferenceRequest):
        chan.send(Stage(stage="init"))
        return reference.run_reference(chan, req, trials.build_model(problem.Model, problem, req.init_seed, device), problem, requests)
    if isinstance(req, ServeRequest):
        model = trials.build_model(problem.Model, problem, req.init_seed, device)
        return forward_server.serve(chan, requests, forward_server.Server(Path(req.exchange), lambda given: model(*given)))
    build_dir, source = Path(os.environ["TORCH_EXTENSIONS_DIR"]), Path(req.candidate_path)
    headers = precompiled.Headers(build_dir.parent)  # the build root: shared by every candidate's build
    headers.install()  # both roles: the candidate child must write the same build.ninja, or ninja rebuilds
    lean_headers.install()  # the same: a .cu built lean (or full after a failed lean build) loads as it was built
    nvcc_driver.install()  # the same: nvcc's front ends side by side
    if isinstance(req, ProfileRequest):
        jail.narrow_profile_target()  # before any candidate code: its /proc is its own, not ncu's
        module = loading.import_file(source, "kforge_candidate")  # the cache's build: nothing is compiled
        return _run_profile(chan, req, trials.build_model(module.ModelNew, problem, req.init_seed, device), problem)
    language = languages.language_of(source.read_text(errors="replace"), req.language)
    watch = watches.Watch(Path(problem.__file__), source, language, device)
    watch.install()  # before the candidate is imported: Triton's interpreter is chosen when a kernel is decorated
    judge = guard.Guard(guard.harness_modules(problem), held=watch.held())
    chan.send(Stage(stage="compile"))
    module, seconds, cached = loading.load_candidate(source, build_dir)
    chan.send(Compiled(seconds=seconds, cache_hit=cached, steps={} if cached else loading.build_steps(build_dir),
                       headers=[*lean_headers.builds, *precompiled.builds]))
    if isinstance(req, CandidateRequest):
        judge.check("at import", dispatcher=False)  # the dispatcher is read once, last (see Guard.check)
        chan.send(Stage(stage="init"))
        model = trials.build_model(module.ModelNew, problem, req.init_seed, device)
        judge.check("in __init__", dispatcher=False)
        candidate.run(chan, req, model, problem, watch, requests,
                      lambda stage: judge.check(f"during {stage}", dispatcher=stage in ("probe", "serving")))


def _run_profile(chan: stages.Channel, req: ProfileRequest, model, problem) -> None:
    """A warm-up call (module load and first-call setup stay out of the profile), then `calls` forward calls, each
    alone inside the NVTX range `kforge_forward` that ncu is told to profile (--nvtx-include kforge_forward/)."""
    inputs = trials.make_inputs(problem, req.input_seed, "cuda")  # cast to the precision, as the model is
    with torch.no_grad():
        model(*inputs)
        torch.cuda.synchronize()
        for _ in range(req.calls):
            torch.cuda.nvtx.range_push("kforge_forward")
            model(*inputs)
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
    chan.send(Profiled(calls=req.calls))

def _run_introspect(chan: stages.Channel, req: IntrospectRequest) -> None:
    """Each problem file in turn: one that raises is answered with its error and the next goes on (a hang or a
    crash is the parent's to see and name)."""
    for path in req.problem_paths:
        chan.send(introspect.measure(path, req.overrides.get(path, {})))

def _said(exc: BaseException) -> str:
    """What the failure says, with a CUDA out-of-memory named as one: PyTorch's allocator, before it raises its
    out-of-memory error, asks NVML for the device's processes, and NVML does not start in the jail, so what comes
    out is an internal assert that says nothing of memory (seen on the H100: tests/adversarial/relu/gpu_out_of_memory.py)."""
    text = str(exc)
    if "nvmlInit_v2_" in text and "CUDACachingAllocator" in text:
        return (f"CUDA out of memory: an allocation failed and PyTorch's report of it stopped at NVML, which the jail "
                f"withholds ({text})")
    return text

def main(request_fd: int, result_fd: int) -> None:
    """The child's whole life (never returns): its own interpreter's, or a fork of evaluator/sandbox/forkserver.py's."""
    confined = seccomp.forbid_touching_parent(network=_own_network())  # before any candidate or problem code runs
    gc.freeze()  # what is loaded so far: the leak check's gc.collect() walks only what comes after (80 ms -> 17 us)
    requests = os.fdopen(request_fd, "rb")  # the request, then (reference, candidate) the parent's answers
    chan = stages.Channel(result_fd)
    try:
        _warm_cuda()
        chan.send(Loaded())  # the parent gives a device only to a child that is ready to use it
        _serve(chan, read_request(requests.readline()), confined, requests)
    except guard.Tampered as exc:
        chan.send(Cheat(exploit="judge_tampering", detail=f"replaced what the judge relies on {exc}"))
        sys.stdout.flush()
        os._exit(3)
    except BaseException as exc:  # noqa: BLE001 - every failure of candidate code is a verdict, not a crash
        chan.send(Error(exc_type=type(exc).__name__, message=_said(exc)[-4000:], traceback=traceback.format_exc()[-6000:]))
        sys.stdout.flush()
        os._exit(1)
    chan.send(Done())
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: a candidate's broken CUDA context must not hang the exit


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
