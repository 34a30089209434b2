"""Problem introspection: the bytes a problem's forward moves and the FLOPs it does, at the file's own (full) size
or at a batch's size (evaluator.parent.flops: the FLOPs of the judge's floor).

Problem files are code (an imported KernelBench file comes from anywhere), so they run where all code kforge judges
runs: in an evaluator child (role `introspect`), in the jail, under the limits; the parent never executes them. The
child builds the model and its inputs on torch's meta device (shapes only: no memory, no compute): bytes = inputs +
parameters + buffers + outputs, FLOPs = torch's FlopCounterMode (matmuls and convolutions only, so None for
element-wise problems, and for inputs narrower than 16 bits, where the floor's 16-bit peak would not bound the
arithmetic). One child measures the files in turn. A file that raises is answered with its error; one
that hangs past its budget or kills its child is named with the cause, and a fresh child goes on with the rest.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

from pydantic import ValidationError

from evaluator.contracts import Limits
from evaluator.parent.jail_spec import jail_spec, require_layers
from evaluator.protocol import IntrospectRequest, Measured, Precision, misfits
from evaluator.sandbox.results import ChildResult
from evaluator.sandbox.spawn import Child

PER_FILE_S = 60.0  # a forward on the meta device takes well under a second; a file past this hangs


def introspect(paths: list[Path], sandbox: str = "strict", limits: Limits | None = None,
               per_file_s: float = PER_FILE_S, overrides: dict[str, dict[str, Any]] | None = None,
               stop: threading.Event | None = None, on_answer: Callable[[str, Measured], None] | None = None,
               precision: Precision = "fp32") -> dict[str, Measured]:
    """Each file's measurement, or its error, keyed by its path as given; `overrides` resizes a file (path ->
    module globals); `on_answer` hears each as it comes; `precision` is the dtype its bytes are counted at. Raises EvaluatorError when a sandbox layer is missing
    in strict mode (nothing runs then)."""
    limits, todo, found = limits or Limits(), [str(p) for p in paths], {}
    if not todo:
        return found
    scratch = Path(tempfile.mkdtemp(prefix="kforge-introspect-"))
    scratch.chmod(0o711)  # as a batch's root: a child running as another uid reaches its own folder in it
    heard = on_answer or (lambda path, measured: None)
    try:
        require_layers(scratch, sandbox)
        while todo and not (stop and stop.is_set()):  # each child answers at least its first file, so this ends
            asked = IntrospectRequest(problem_paths=todo, precision=precision,
                                      overrides={p: o for p, o in (overrides or {}).items() if p in todo})
            found |= _measure_in_child(scratch / f"child{len(found)}", asked, limits, per_file_s, stop, heard)
            todo = [p for p in todo if p not in found]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return found


def _measure_in_child(workdir: Path, request: IntrospectRequest, limits: Limits, per_file_s: float,
                      stop: threading.Event | None, heard: Callable[[str, Measured], None]) -> dict[str, Measured]:
    """The answers one child gives, in order, until it ends or stalls; the file it stalled or died on is answered
    with why."""
    paths = request.problem_paths
    child = Child(workdir, workdir / "build", limits, cap_address_space=True, stop=stop,
                  jail=jail_spec([workdir], [Path(p) for p in paths]))
    found: dict[str, Measured] = {}
    try:
        child.begin(request)
        message = child.wait_for("env")  # the start (interpreter, torch) runs no problem code: the whole limit
        for path in paths if message is not None else []:
            message = child.wait_for("measured", child.result.messages.index(message) + 1, timeout_s=per_file_s)
            if message is None:
                break
            found[path] = _answer(path, message)
            heard(path, found[path])
    finally:
        result = child.finish(wait=len(found) == len(paths))
    stalled = next((p for p in paths if p not in found), None)
    if stalled is not None and not result.cancelled:
        found[stalled] = Measured(which=stalled, error=_cause(result, per_file_s, limits))
        heard(stalled, found[stalled])
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
