"""Problem introspection: the bytes a problem's forward moves and the FLOPs it does, at the file's own (full) size.

Problem files are code (an imported KernelBench file comes from anywhere), so they run where all code kforge judges
runs: in an evaluator child (role `introspect`), in the jail, under the limits; the parent never executes them. The
child builds the model and its inputs on torch's meta device (shapes only: no memory, no compute): bytes = inputs +
parameters + buffers + outputs, FLOPs = torch's FlopCounterMode (matmuls and convolutions only, so None for
element-wise problems). One child measures the files in turn. A file that raises is answered with its error; one
that hangs past its budget or kills its child is named with the cause, and a fresh child goes on with the rest.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
from pathlib import Path

from pydantic import ValidationError

from evaluator.contracts import Limits
from evaluator.protocol import IntrospectRequest, Measured, misfits
from evaluator.results import ChildResult
from evaluator.sandbox import Child, jail_spec, require_layers

PER_FILE_S = 60.0  # a forward on the meta device takes well under a second; a file past this hangs


def introspect(paths: list[Path], sandbox: str = "strict", limits: Limits | None = None,
               per_file_s: float = PER_FILE_S) -> dict[str, Measured]:
    """Each file's measurement, or its error, keyed by its path as given. Raises EvaluatorError when a sandbox layer
    is missing in strict mode (nothing runs then)."""
    limits, todo, found = limits or Limits(), [str(p) for p in paths], {}
    if not todo:
        return found
    scratch = Path(tempfile.mkdtemp(prefix="kforge-introspect-"))
    scratch.chmod(0o711)  # as a batch's root: a child running as another uid reaches its own folder in it
    try:
        require_layers(scratch, sandbox)
        while todo:  # each child answers at least its first file, so this ends
            found |= _measure_in_child(scratch / f"child{len(found)}", todo, limits, per_file_s)
            todo = [p for p in todo if p not in found]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return found


def _measure_in_child(workdir: Path, paths: list[str], limits: Limits, per_file_s: float) -> dict[str, Measured]:
    """The answers one child gives, in order, until it ends or stalls; the file it stalled or died on is answered
    with why."""
    child = Child(workdir, workdir / "build", limits, cap_address_space=True,
                  jail=jail_spec([workdir], [Path(p) for p in paths]))
    found: dict[str, Measured] = {}
    try:
        child.begin(IntrospectRequest(problem_paths=paths))
        message = child.wait_for("env")  # the start (interpreter, torch) runs no problem code: the whole limit
        for path in paths if message is not None else []:
            message = child.wait_for("measured", child.result.messages.index(message) + 1, timeout_s=per_file_s)
            if message is None:
                break
            found[path] = _answer(path, message)
    finally:
        result = child.finish(wait=len(found) == len(paths))
    stalled = next((p for p in paths if p not in found), None)
    if stalled is not None:
        found[stalled] = Measured(which=stalled, error=_cause(result, per_file_s, limits))
    return found


def _answer(path: str, message: dict) -> Measured:
    """The child's answer on `path`. The result channel is open to the problem file's code, so a line that does not
    fit, or names another file, was written by it: an error of that file, not a crash of kforge."""
    try:
        answer = Measured.model_validate(message)
    except ValidationError as exc:
        return Measured(which=path, error=f"a forged answer on the result channel ({misfits(exc)})")
    return answer if answer.which == path else Measured(which=path, error=f"a forged answer naming {answer.which!r}")


def _cause(result: ChildResult, per_file_s: float, limits: Limits) -> str:
    """Why a child gave no answer on a file, in words."""
    if result.timed_out:
        return f"no answer within {per_file_s:.0f} s (the file hangs, or is far too slow on the meta device)"
    if result.memory_exceeded:
        return f"exceeded the host memory limit ({limits.memory_mb:,} MB)"
    if error := result.last("error"):
        return f"{error.get('exc_type')}: {str(error.get('message', '')).strip()[:300]}"
    code = result.returncode or 0
    how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
    tail = result.log_tail(600).strip().splitlines()
    return f"its child {how} while measuring it" + (f"; log: {tail[-1][:200]}" if tail else "")


def measure(path: str) -> Measured:
    """Child side: one forward pass of the file's Model on meta tensors; any failure of the file is its answer."""
    import runpy

    import torch
    from torch.utils._pytree import tree_leaves
    from torch.utils.flop_counter import FlopCounterMode

    try:
        with torch.device("meta"):
            ns = runpy.run_path(path)
            model, inputs = ns["Model"](*ns["get_init_inputs"]()), ns["get_inputs"]()
            with torch.no_grad(), FlopCounterMode(display=False) as counter:
                outputs = model(*inputs)
        tensors = [*tree_leaves(inputs), *model.parameters(), *model.buffers(), *tree_leaves(outputs)]
        nbytes = sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))
    except Exception as exc:  # noqa: BLE001 - a failing problem file is an answer, not the end of the child
        return Measured(which=path, error=f"{type(exc).__name__}: {str(exc).strip()[:300]}")
    return Measured(which=path, bytes_moved=nbytes or None, flops=counter.get_total_flops() or None)
