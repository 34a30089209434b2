"""The parent <-> child protocol, typed: the request a child gets, the parent's later lines to it, and the messages
it sends back. One JSON object per line on each pipe.

Both sides use these models. The parent builds and serializes them. A child validates its request before anything
else runs, so a malformed request is one clear error, not a KeyError deep in a stage. The parent reads the messages
the judge relies on through them: the channel is writable by candidate code, so a message that does not fit its model
was forged, and the judge says so rather than crash. Only pydantic is imported here: a child pays nothing extra
to start, and the parent needs no torch to speak the protocol.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError


# The GPU a child is started for, in its environment: its problem's, known before the child gets it
# (evaluator.parent.references.OpenProblems places each problem): the child makes its CUDA context while it waits
# (evaluator/child/main.py, _warm_cuda).
WARM_GPU = "KFORGE_WARM_GPU"

# KernelBench's precisions: the dtype a child casts floating-point inputs and models to (evaluator/child/trials.py)
Precision = Literal["fp32", "fp16", "bf16"]


class _Line(BaseModel):
    """Lines kforge writes itself: a field it does not know is a bug on one side, caught at once."""

    model_config = ConfigDict(extra="forbid")


# -- parent -> child: the request -------------------------------------------------------------------------------


class TimingRequest(_Line):
    enabled: bool
    warmup_ms: float
    rep_ms: float
    min_reps: int
    max_reps: int
    rel_ci: float | None
    paired: bool = True  # a candidate's rounds wait for the reference's beside them (evaluator/verdict/pacing.py)


class _RunRequest(_Line):
    """What every child that loads a problem at its evaluation size gets."""

    problem_path: str
    device: Literal["cpu", "cuda"]
    overrides: dict[str, Any] = Field(default_factory=dict)  # module globals of the small size
    init_seed: int
    atol: float
    rtol: float
    out_dir: str
    leak_calls: int
    compile_baseline: bool
    cpu_threads: int
    timing: TimingRequest
    precision: Precision
    gpu: str | None = None  # added when the request goes out: the device the child pins itself to
    language: str | None = None  # the candidate's kernel language when overridden (--backend); None: read from its code


class CompileRequest(_RunRequest):
    """Import the candidate, which builds it. No seeds: a compile child could stash them for the candidate child."""

    role: Literal["compile"] = "compile"
    candidate_path: str


class _SeededRequest(_RunRequest):
    """The secret seeds of the batch's calls, for the children that run the model."""

    seeds: list[tuple[str, int]]
    timing_seed: int
    verify_seed: int


class CandidateRequest(_SeededRequest):
    role: Literal["candidate"] = "candidate"
    candidate_path: str
    # the inputs file of its forward exchange (evaluator.exchange): where set, the parent times it
    exchange: str | None = None


class ServeRequest(_RunRequest):
    """Serve the problem's Model as a forward server (evaluator.child.forward_server) over the exchange whose inputs
    file is `exchange`: the reference's side of trusted timing, in a process of its own as the candidate's is. No
    seeds: its inputs are the comparer's to make."""

    role: Literal["serve"] = "serve"
    exchange: str


class ReferenceRequest(_SeededRequest):
    role: Literal["reference"] = "reference"
    resident_bytes: int  # expected outputs the comparer keeps on the device; the rest are recomputed
    audit: bool = False  # run the trivial answers against the problem's check once ready
    exchange: str | None = None  # its folder of forward exchanges: it fills its candidates' inputs and serves its own


class IntrospectRequest(_Line):
    """Measure problem files on torch's meta device (shapes only, no data, no compute), at their own size or
    resized by `overrides` (path -> module globals, as a batch's --size small resizes them)."""

    role: Literal["introspect"] = "introspect"
    problem_paths: list[str]
    overrides: dict[str, dict[str, Any]] = Field(default_factory=dict)
    precision: Precision = "fp32"  # bytes moved are counted at the batch's dtype
    gpu: str | None = None


class ProfileRequest(_Line):
    """Run a correct candidate's forward under Nsight Compute (evaluator/parent/profiling.py): a warm-up call, then `calls`
    calls inside the NVTX range `kforge_forward`, which is all ncu profiles. No seeds: nothing here is judged."""

    role: Literal["profile"] = "profile"
    problem_path: str
    candidate_path: str
    device: Literal["cuda"] = "cuda"
    overrides: dict[str, Any] = Field(default_factory=dict)
    init_seed: int
    input_seed: int
    calls: int = Field(ge=1)
    precision: Precision
    gpu: str | None = None


Request = Annotated[Union[CompileRequest, CandidateRequest, ReferenceRequest, ServeRequest, IntrospectRequest,
                          ProfileRequest],
                    Field(discriminator="role")]
_REQUEST: TypeAdapter[Request] = TypeAdapter(Request)


class MalformedRequest(ValueError):
    """The request line does not fit the protocol: kforge's own bug (or a parent of another version)."""


def misfits(exc: ValidationError) -> str:
    """What does not fit, on one line (a cause is one line): `field.path: why; ...`."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'line'}: {e['msg']}" for e in exc.errors()[:5])


def read_request(line: bytes) -> Request:
    """The child's first act: its request, validated, or MalformedRequest naming what is wrong."""
    try:
        return _REQUEST.validate_json(line)
    except ValidationError as exc:
        raise MalformedRequest(f"malformed request from kforge: {misfits(exc)}") from None


# -- parent -> child: later lines --------------------------------------------------------------------------------


class Ack(_Line):
    """To a candidate child: the outputs it handed over are judged, it may go on."""

    ack: str


class Go(_Line):
    """To a candidate child, at a `pace`: whether to time another round (the reference's block is timed)."""

    go: bool


class Check(_Line):
    """To a candidate child, after a round of timed calls (`rep`): which of them to hand over. Decided by the
    parent after the calls, at random: nothing in the candidate's process knows beforehand which are compared."""

    checked: list[int]


class TimeBlock(_Line):
    """To the comparer: time `reps` calls of the reference on the inputs of timed reps first.. (one side of a
    pair of interleaved timing, evaluator/verdict/pacing.py)."""

    op: Literal["time"] = "time"
    first: int = Field(ge=0)
    reps: int = Field(gt=0)


class Arm(_Line):
    """To a forward server (evaluator.child.forward_server): make ready for call `arm` and wait for the parent's go;
    `end`: no more calls; `empty`: the call's steps without the model (the reference's server only: what the
    steps themselves cost on CUDA, taken off both sides' calls)."""

    arm: int = 0
    end: bool = False
    empty: bool = False


class Fill(_Line):
    """To the comparer: write the inputs of call `label` into the exchange `name` of its folder, then mark it filled
    (`seq`) in that exchange's ctl page."""

    op: Literal["fill"] = "fill"
    name: str
    label: str
    seq: int = Field(gt=0)


class Compare(_Line):
    """To a comparer: judge one handed-over call against the expected outputs of `expected`."""

    op: Literal["compare"] = "compare"
    label: str
    expected: str
    trial: int
    outputs: Any  # the candidate's descriptions as it handed them over, unchecked: the comparer reads them warily
    path: str | None = None  # CPU runs: the raw-bytes file of the outputs
    kept: str | None = None  # CUDA forward serving: the exchange whose snapshot of this call the comparer kept (StopClock)


class Audit(_Line):
    op: Literal["audit"] = "audit"


class Close(_Line):
    op: Literal["close"] = "close"


class StopClock(_Line):
    """To the comparer, on CUDA: the server of exchange `name` queued call `seq` (its outputs as `outputs` describes
    them, each with its IPC handle); stop the comparer's clock behind the call's `done` event, read the lattice of
    each output that `starts` place, snapshot the whole of them where `keep` says (as `label`, for a later
    Compare), then let the held stream run. `abort`: the server never queued it; only let the stream go."""

    op: Literal["stop_clock"] = "stop_clock"
    name: str
    seq: int = Field(gt=0)
    label: str = ""
    outputs: list[dict[str, Any]] = Field(default_factory=list)
    starts: list[list[int] | None] = Field(default_factory=list)
    keep: Literal["", "drawn", "last"] = ""  # last: a round's last call, kept until the next one's
    abort: bool = False
    within_s: float = Field(default=60.0, gt=0)  # what is left of the candidate's budget: the call's end is awaited that long


class Release(_Line):
    """To the comparer, on CUDA: let call `seq` of exchange `name` run before its server queued it (a forward that
    waits for the GPU cannot queue it while the call's head is held)."""

    op: Literal["release"] = "release"
    name: str
    seq: int = Field(gt=0)


class Forget(_Line):
    """To the comparer, on CUDA: exchange `name` serves no more calls; let go of its buffers."""

    op: Literal["forget"] = "forget"
    name: str


ComparerOp = Annotated[Union[Compare, Audit, TimeBlock, Fill, StopClock, Release, Forget, Close], Field(discriminator="op")]
COMPARER_OP: TypeAdapter[ComparerOp] = TypeAdapter(ComparerOp)


# -- child -> parent: the messages -------------------------------------------------------------------------------


class Message(BaseModel):
    """A message of the child. The parent stamps each with its own clock on arrival (`_t`, read as `arrived`; never
    written by the child): other extra keys pass. Infinity and NaN are written as such (JSON's null would turn an
    infinite error into a malformed message)."""

    model_config = ConfigDict(ser_json_inf_nan="constants")
    event: str
    arrived: float | None = Field(None, alias="_t", exclude=True)  # the parent's time.monotonic() on arrival


class Env(Message):
    event: Literal["env"] = "env"
    device_name: str
    torch_version: str
    cuda_version: str | None
    confined: bool
    sandbox: dict[str, str]


class Stage(Message):
    event: Literal["stage"] = "stage"
    stage: str


class Loaded(Message):
    """The child's interpreter, jail and imports are done and it waits for its request. Sent before any problem
    or candidate code runs, so the parent may trust it for one thing: when to give the child a device."""

    event: Literal["loaded"] = "loaded"


class Compiled(Message):
    event: Literal["compiled"] = "compiled"
    seconds: float
    cache_hit: bool
    steps: dict[str, float]
    headers: list[str] = Field(default_factory=list)  # how each CUDA source was built: lean or full (evaluator/build/lean_headers.py)


class Kernels(Message):
    """The candidate's own kernels: the compiled extensions it loaded and the Triton, CuTe DSL or TileLang kernels
    made from its file (evaluator.child.watches.Watch), sent once after the trials."""

    event: Literal["kernels"] = "kernels"
    modules: list[str] = Field(default_factory=list)  # extension modules loaded, then kernels made from its file
    unverifiable: list[str] = Field(default_factory=list)  # loaded, but calls into them cannot be counted
    foreign: list[str] = Field(default_factory=list)  # kernels made elsewhere that the trials launched
    not_compiled: dict[str, str] = Field(default_factory=dict)  # interpreted kernel -> the GPU compiler's first error
    # Triton kernel -> (configs benchmarked, seconds) of its autotuning, untimed (evaluator/child/triton_autotune.py)
    autotuned: dict[str, tuple[int, float]] = Field(default_factory=dict)


class Calls(BaseModel):
    """What a watched call ran (counted by evaluator.child.kernel_watch.KernelWatch)."""

    kernel: int = 0  # calls of its compiled extensions' functions, launches of its own kernels
    reference: int = 0  # calls into the reference problem's code
    foreign: int = 0  # launches of kernels made outside the candidate's file


class TrialReport(BaseModel):
    """One call of the trials. The judge needs `inputs_changed` and `calls` of a candidate's; the outputs' descriptions
    and the sizes are the reference's (a candidate's outputs are judged from what it hands over)."""

    inputs_changed: bool
    calls: Calls | None  # None where no kernel watch runs (the reference)
    outputs: list[dict[str, Any]] = Field(default_factory=list)
    max_input_numel: int = 0
    io_bytes: int = 0
    call_ms: float = 0.0  # its wall time in the child: the leak check's windows follow the fastest trial's


class Trials(Message):
    event: Literal["trials"] = "trials"
    trials: dict[str, TrialReport]


class Leaks(Message):
    event: Literal["leaks"] = "leaks"
    growth: dict[str, tuple[int, int]]  # key -> growth over the two windows of calls
    calls: int = Field(ge=1)  # calls in each window


class LeakMark(Message):
    """At each mark of the leak check on a GPU (evaluator.sandbox.gpumemory.MARKS): the parent reads the device memory of
    the candidate's processes, then answers Ack."""

    event: Literal["leak_mark"] = "leak_mark"
    which: int = Field(ge=0)


class Timing(Message):
    event: Literal["timing"] = "timing"
    which: str  # model, compiled
    samples: list[float]
    untimed_calls: int = 0  # calls made before the timed loop began (warmup, estimate)
    fresh_inputs: str = ""  # how the inputs were refreshed between calls (trials.FreshInputs.policy)
    fill_s: float = 0.0  # seconds the timed reps' input fills took (outside the timed window, inside the loop)
    steps_ms: float = 0.0  # CUDA forward serving: an empty call's window, taken off every sample of both sides


class Pace(Message):
    """Before each timed round of the candidate (reps > 0) and after the last (reps == 0): the parent times the
    reference beside it, then answers Go."""

    event: Literal["pace"] = "pace"
    which: int = Field(ge=0)  # the first rep of the coming round (after the last: how many reps were taken)
    reps: int = Field(ge=0)
    last_round: list[float]  # the samples of the round before
    least: int  # reps that run whatever the answer


class Rep(Message):
    """After a round of timed calls, their outputs snapshotted: the parent answers Check."""

    event: Literal["rep"] = "rep"
    which: int = Field(ge=0)  # the round's first rep
    reps: int = Field(ge=1)  # how many
    least: int = Field(ge=1)  # reps that run whatever happens (the parent's odds of a check follow it)


class Block(Message):
    """The comparer's answer to TimeBlock: the reference's samples, or why it could not time them."""

    event: Literal["block"] = "block"
    samples: list[float] = Field(default_factory=list)
    error: str = ""


class Probe(Message):
    event: Literal["probe"] = "probe"
    outputs: dict[str, list[dict[str, Any]]]  # label -> descriptions of a timed call's (or the verify call's) outputs
    inputs_changed: bool


class Memory(Message):
    event: Literal["memory"] = "memory"
    peak_cuda_allocated: int
    host_rss: int


class Outputs(Message):
    """A candidate hands one call's outputs over (and waits for an Ack)."""

    event: Literal["outputs"] = "outputs"
    which: str
    outputs: list[dict[str, Any]]


class Done(Message):
    event: Literal["done"] = "done"


class Error(Message):
    event: Literal["error"] = "error"
    exc_type: str
    message: str
    traceback: str


class KforgeFailure(RuntimeError):
    """kforge's own work in the child ran out of memory or could not write (a copy of the outputs, their handoff,
    a checksum), not the candidate's code: raised in the child (evaluator/child/failures.py), it arrives as an
    Error of this exc_type. The parent holds it as kforge's failure once the candidate's trials passed
    (evaluator/verdict/rules.py): the child's word alone never turns a failure into one of kforge's."""


class Cheat(Message):
    """What the child itself caught (the guard saw the harness tampered with)."""

    event: Literal["cheat"] = "cheat"
    exploit: str
    detail: str


class Quiet(Message):
    """The reference's outputs are made; it asks for the device quiet before it times its model (answered with a
    Go once nothing else of the batch is left running there: a comparer that was closing lets go of its memory
    while the outputs are made, never while the model is timed)."""

    event: Literal["quiet"] = "quiet"


class Serving(Message):
    """A forward server is ready for its first call: `control`, the address of its control page in its memory."""

    event: Literal["serving"] = "serving"
    control: int


class Ready(Message):
    """The reference ran: it now serves as the problem's comparer."""

    event: Literal["ready"] = "ready"
    footprint: int
    audit: list[dict[str, Any]]


class Compared(Message):
    """The comparer's answer on one call: the comparison, or an error if it could not read the outputs."""

    event: Literal["compared"] = "compared"
    which: str
    error: str = ""
    mismatch: dict[str, Any] | None = None
    max_abs_err: float = 0.0
    tolerance_used: float = 0.0
    stale: str = ""  # the other call whose expected output this one matches
    late: str = ""  # how the snapshot differs from what the timed window read of the outputs (timing.glimpse)
    own_failure: bool = False  # the error is the comparer's own (out of GPU memory), not the candidate's outputs
    comparer_died: bool = False  # no answer came: the comparer is gone (set by the parent, evaluator.parent.references)
    work_s: float = 0.0  # the comparer's own seconds on the request (the rest of a handoff is the way there and back)
    recompute_s: float = 0.0  # of which the expected outputs were recomputed (a timed call's: not resident)


class Clocked(Message):
    """The comparer's answer to StopClock: the call's milliseconds by its own events, what the lattice read of each
    output ({start, step, bytes} or None), or why not."""

    event: Literal["clocked"] = "clocked"
    ms: float = 0.0
    seen: list[dict[str, Any] | None] = Field(default_factory=list)
    error: str = ""


class Audited(Message):
    event: Literal["audited"] = "audited"
    findings: list[dict[str, Any]]


class Measured(Message):
    """An introspect child's answer on one problem file: its cost at the size asked, or why it could not be measured."""

    event: Literal["measured"] = "measured"
    which: str  # the problem file's path, as requested
    bytes_moved: int | None = None
    flops: int | None = None
    error: str = ""


class Profiled(Message):
    """A profile child ran its forward calls inside the NVTX range (ncu's numbers are in ncu's own file)."""

    event: Literal["profiled"] = "profiled"
    calls: int


# What a candidate child sends, and how often: each event once, except one `stage` per stage and one `timing` per
# kind. Anything else on its channel was written by the candidate.
CANDIDATE_EVENTS = frozenset(m.model_fields["event"].default for m in (
    Loaded, Env, Stage, Compiled, Kernels, Trials, LeakMark, Leaks, Timing, Pace, Rep, Probe, Serving, Memory, Done, Error,
    Cheat, Outputs))
