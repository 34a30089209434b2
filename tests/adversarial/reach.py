"""What hostile candidates reach in their own process: the timing loop on their stack, which calls it may
check, a hook that runs after the timer."""
import sys
import time


def in_timing() -> bool:
    """Whether a caller up the stack is the harness's timed loop (timing.bench)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "bench":
            return True
        frame = frame.f_back
    return False


def after_timer(then):
    """A profile hook that runs `then` once the harness has read its timer (the return of perf_counter on CPU,
    of a CUDA event's record on a GPU), and removes itself."""
    def hook(frame, event, arg):
        if (event == "c_return" and arg is time.perf_counter) or (event == "return" and frame.f_code.co_name == "record"):
            sys.setprofile(None)
            then()
    return hook


def _frames():
    frame = sys._getframe(2)
    while frame is not None:
        yield frame
        frame = frame.f_back


def will_be_checked() -> bool | None:
    """None outside the timed loop; else whether this rep is one the harness snapshots, as far as frames say."""
    found = {f.f_code.co_name: f.f_locals for f in _frames()}
    loop = found.get("_cpu_round") or found.get("_cuda_round")
    if loop is None:
        return None
    rep, last = loop["first"] + loop["k"], loop["k"] == loop["n"] - 1
    keeper = loop.get("on_rep")
    fraction = getattr(keeper, "fraction", None)
    if fraction is None:
        return last
    least, checked = loop["least"], 3
    return last or rep in {int((fraction + k / checked) % 1 * least) for k in range(checked)}


def work_in_fill(work) -> dict:
    """Wraps the problem's get_inputs, so that each input fill also computes `work` of the new first input: kept
    by its data pointer in the dict returned, for the timed call to hand back at once."""
    problem = sys.modules["kforge_problem"]
    original, ready = problem.get_inputs, {}

    def get_inputs():
        inputs = original()
        ready.clear()
        ready[inputs[0].data_ptr()] = work(inputs[0])
        return inputs
    problem.get_inputs = get_inputs
    return ready


def resizing_cache(relu):
    """A forward() that works outside timing; in timing it returns its first timed output every time, after
    resizing the problem (a global its get_inputs reads) so that the next input fills no longer fit."""
    problem, cached = sys.modules["kforge_problem"], []

    def forward(self, x):
        if not in_timing():
            return relu(x)
        if not cached:
            cached.append(relu(x))
            problem.batch_size += 1
        return cached[0]
    return forward


def quiet_probe() -> None:
    """Patches the child-side probe message so that it lists no timed call's outputs."""
    from evaluator import protocol

    class Quiet(protocol.Probe):
        def __init__(self, **kw):
            kw["outputs"] = {k: v for k, v in kw.get("outputs", {}).items() if not k.startswith("timed_")}
            super().__init__(**kw)

    protocol.Probe = Quiet
    for name in ("evaluator.child.candidate", "__main__"):  # the child's entry point, imported or run as a script
        if hasattr(sys.modules.get(name), "Probe"):
            sys.modules[name].Probe = Quiet


def hooked_forward(relu):
    """A forward() that works outside timing; in timing it returns an empty output and leaves a profile hook that
    fills it with `relu` once the harness has read its timer (after_timer)."""
    import torch

    def forward(self, x):
        if not in_timing():
            return relu(x)
        out = torch.empty_like(x)
        sys.setprofile(after_timer(lambda: out.copy_(relu(x))))
        return out
    return forward


def _in_keeper() -> bool:
    """Whether the harness's thread is past a timed call's timer, in the hook that snapshots its outputs."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "__call__" and type(frame.f_locals.get("self")).__name__ == "_Keeper":
            return True
        frame = frame.f_back
    return False


def collected_forward(relu):
    """A forward() that works outside timing; in timing it returns an empty output and leaves the work to a
    garbage-collector callback. With the threshold at 1 a collection starts at nearly every allocation of a
    container, in the harness's own thread; the callback fills the output at the first one after the timer
    stopped, before the harness snapshots it. No hook is set that the timed window could clear."""
    import gc

    import torch

    pending = []

    def late(phase, _info):
        if pending and phase == "start" and _in_keeper():
            out, x = pending.pop()
            out.copy_(relu(x))

    gc.callbacks.append(late)
    gc.set_threshold(1)

    def forward(self, x):
        if not in_timing():
            return relu(x)
        out = torch.empty_like(x)
        pending[:] = [(out, x)]
        return out
    return forward
