"""The parent <-> child protocol (evaluator.protocol) and problem introspection (evaluator.parent.introspect), with real
children in the jail: a malformed request is one clear error, and a problem file that raises, hangs or kills its child
is named while the other files are still measured."""

from __future__ import annotations

import shutil
from pathlib import Path

from pydantic import BaseModel

from evaluator.parent.batch import Batch
from evaluator.contracts import Limits, Status
from evaluator.parent.introspect import introspect
from evaluator.parent.jail_spec import jail_spec
from evaluator.verdict.rules import ended_badly
from evaluator.protocol import CandidateRequest, CompileRequest, ReferenceRequest, read_request
from evaluator.sandbox.results import ChildResult
from evaluator.sandbox.spawn import Child
from reference_problems import resolve_problem

RELU = resolve_problem("relu")


class _Stray(BaseModel):
    """A request line of the wrong shape: a candidate request without its paths, seeds or settings."""

    role: str = "candidate"
    device: str = "tpu"
    gpu: str | None = None


def test_a_malformed_request_is_one_clear_error_of_the_child(tmp_path: Path) -> None:
    child = Child(tmp_path, tmp_path / "build", Limits(timeout_s=120), cap_address_space=True,
                  jail=jail_spec([tmp_path], []))
    child.begin(_Stray())
    result = child.finish()
    error = result.last("error")
    assert result.returncode == 1 and error["exc_type"] == "MalformedRequest", result.messages
    assert error["message"].startswith("malformed request from kforge: ")
    assert "candidate.device" in error["message"] and "candidate.problem_path: Field required" in error["message"]


def test_a_line_sent_to_a_child_that_died_does_not_break_its_finish(tmp_path: Path) -> None:
    """A reference child dead before its Close line (the H100 audit, benchmarks/problem_audit.py): finish reports how it ended."""
    child = Child(tmp_path, tmp_path / "build", Limits(timeout_s=120), cap_address_space=True,
                  jail=jail_spec([tmp_path], []))
    child.begin(_Stray())
    child.proc.wait(timeout=120)
    child.send(_Stray())  # the pipe has no reader: the line stays in the buffer
    assert child.finish().returncode == 1


def test_the_batch_builds_each_role_its_typed_request(cpu_settings, tmp_path: Path) -> None:
    """Seeds go to the children that run the model, never to the compile child; each request reads back the same."""
    batch = Batch(cpu_settings)
    try:
        candidate = tmp_path / "c.py"
        candidate.write_text("class ModelNew: pass\n")
        built = {role: batch.request(role, RELU, tmp_path / role, candidate if role != "reference" else None,
                                     **({"resident_bytes": 1} if role == "reference" else {}))
                 for role in ("compile", "candidate", "reference")}
    finally:
        shutil.rmtree(batch.root)
    assert isinstance(built["compile"], CompileRequest) and "seeds" not in built["compile"].model_dump()
    assert isinstance(built["candidate"], CandidateRequest) and len(built["candidate"].seeds) == cpu_settings.trials
    assert isinstance(built["reference"], ReferenceRequest) and len(built["reference"].seeds) == cpu_settings.trials + 2
    assert built["candidate"].overrides == RELU.meta.small
    for request in built.values():
        assert read_request(request.model_dump_json().encode()) == request


GOOD = """import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x @ x
def get_inputs():
    return [torch.randn(64, 64)]
def get_init_inputs():
    return []
"""


def _problem(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(body)
    return path


def test_introspection_names_a_file_that_raises_hangs_or_kills_its_child(tmp_path: Path) -> None:
    """One child measures the files in turn; after a hang or a death a fresh one goes on with the rest."""
    files = [_problem(tmp_path, "raises", "raise ZeroDivisionError('at import')\n"),
             _problem(tmp_path, "hangs", "import time\nwhile True:\n    time.sleep(1)\n"),
             _problem(tmp_path, "good", GOOD),
             _problem(tmp_path, "dies", "import os\nos._exit(7)\n"),
             RELU.path]
    found = introspect(files, per_file_s=15)
    assert list(found) == [str(f) for f in files]
    by = {Path(k).stem: v for k, v in found.items()}
    assert by["raises"].error == "ZeroDivisionError: at import"
    assert by["hangs"].error.startswith("no answer within 15 s")
    assert (by["good"].bytes_moved, by["good"].flops, by["good"].error) == (2 * 64 * 64 * 4, 2 * 64**3, "")
    assert by["dies"].error.startswith("its child exited with code 7")
    assert (by["relu"].bytes_moved, by["relu"].error) == (RELU.meta.bytes_moved, "")


SIZED = """import torch
N = 64
class Model(torch.nn.Module):
    def forward(self, x):
        return x @ x
def get_inputs():
    return [torch.randn(N, N, dtype=DTYPE)]
def get_init_inputs():
    return []
DTYPE = torch.float32
"""


def test_introspection_counts_at_the_size_a_batch_asks_and_answers_as_it_goes(tmp_path: Path) -> None:
    """A batch's FLOPs (evaluator.parent.flops) are counted at its size: the overrides resize the file as the reference
    child's request does. Each answer is heard as it comes; 8-bit inputs get no FLOPs (the 16-bit peak would not
    bound them)."""
    narrow = SIZED.replace("DTYPE = torch.float32", "DTYPE = torch.float8_e4m3fn")
    files = [_problem(tmp_path, "sized", SIZED), _problem(tmp_path, "narrow", narrow)]
    heard: list[str] = []
    found = introspect(files, per_file_s=30, on_answer=lambda path, measured: heard.append(Path(path).stem),
                       overrides={str(files[0]): {"N": 32}})
    assert heard == ["sized", "narrow"]
    assert found[str(files[0])].flops == 2 * 32**3 and found[str(files[0])].bytes_moved == 2 * 32 * 32 * 4
    assert found[str(files[1])].flops is None and found[str(files[1])].error == ""


def test_a_malformed_error_message_from_candidate_code_is_forged_not_a_crash(tmp_path: Path) -> None:
    """A compile child runs candidate code at import, which can write to the result channel: an `error` or `stage`
    message without its fields is a verdict on the candidate, not a KeyError in kforge's compile thread."""
    result = ChildResult(messages=[{"event": "stage", "_t": 0.0}, {"event": "error", "_t": 0.0}], returncode=1,
                         log_path=tmp_path / "child.log")
    outcome = ended_badly(result, 60, 0)
    assert (outcome.status, outcome.evidence.exploit) == (Status.CHEAT, "forged_messages")
    assert "malformed error message: exc_type: Field required" in outcome.evidence.cause


def test_a_request_kforge_cannot_write_raises_at_once_instead_of_starving_its_child(tmp_path: Path) -> None:
    """A torch.dtype in the overrides is not JSON: the parent learns it when it sends, not after the child's
    whole timeout waiting for a request that never went out."""
    import time

    import pytest
    import torch

    from evaluator.contracts import Limits
    from evaluator.parent.jail_spec import jail_spec
    from evaluator.protocol import IntrospectRequest
    from evaluator.sandbox.spawn import Child

    path = _problem(tmp_path, "good", GOOD)
    child = Child(tmp_path / "w", tmp_path / "w" / "build", Limits(timeout_s=120), cap_address_space=True,
                  jail=jail_spec([tmp_path / "w"], [path]))
    began = time.monotonic()
    try:
        with pytest.raises(ValueError, match="dtype|serializ"):
            child.begin(IntrospectRequest(problem_paths=[str(path)], overrides={str(path): {"DTYPE": torch.float16}}))
    finally:
        child.finish(wait=False)
    assert time.monotonic() - began < 30
