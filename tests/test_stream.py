"""Jobs that join a running batch as they arrive (evaluator/parent/stream.py): each gets the verdict a list of the
same jobs would get, a job of a problem the stream was not opened for is refused, and a cancelled stream ends its
batch at once."""

from __future__ import annotations

import threading
import time

import pytest

from conftest import SOLUTIONS
from evaluator import CandidateJob, Status, evaluate
from evaluator.parent.stream import JobStream
from reference_problems import resolve_problem

HARDSWISH = SOLUTIONS / "scale_bias_hardswish"


def _job(name: str) -> CandidateJob:
    return CandidateJob(path=HARDSWISH / f"{name}.py", problem=resolve_problem("scale_bias_hardswish"))


def _judging(stream: JobStream, settings) -> tuple[threading.Thread, list]:
    verdicts: list = []
    thread = threading.Thread(target=lambda: verdicts.extend(evaluate(stream, settings)))
    thread.start()
    return thread, verdicts


def test_jobs_that_arrive_while_the_batch_runs_are_judged_as_a_list_would_be(cpu_settings, tmp_path):
    settings = cpu_settings.model_copy(update={"build_root": tmp_path / "builds", "timing": False})
    fused, broken = _job("cpu_fused_o3"), _job("cpu_compile_error")
    prose = tmp_path / "prose.py"
    prose.write_text("Here is the kernel you asked for, it's fast.\n")
    stream = JobStream([fused.problem])
    thread, verdicts = _judging(stream, settings)
    stream.put(fused)
    time.sleep(1)  # the batch is running when the others arrive
    stream.put(broken)
    stream.put(CandidateJob(path=prose, problem=fused.problem))
    stream.close()
    thread.join(timeout=900)
    judged = {v.solution_path: v for v in verdicts}
    assert judged[str(fused.path)].status is Status.CORRECT, judged[str(fused.path)].evidence.cause
    assert judged[str(broken.path)].status is Status.COMPILE_ERROR
    assert judged[str(prose)].evidence.stage == "parse"  # static: no compile
    again = {v.solution_path: v.status for v in evaluate([fused, broken], settings)}  # the same jobs as a list
    assert again == {path: judged[path].status for path in again}


def test_a_job_of_a_problem_the_stream_was_not_opened_for_is_refused():
    stream = JobStream([resolve_problem("relu")])
    with pytest.raises(ValueError, match="scale_bias_hardswish: not a problem this stream was opened for"):
        stream.put(_job("cpu_fused_o3"))


def test_a_cancelled_stream_ends_its_batch_at_once(cpu_settings, tmp_path):
    settings = cpu_settings.model_copy(update={"build_root": tmp_path / "builds"})
    stream = JobStream([resolve_problem("relu")])
    thread, verdicts = _judging(stream, settings)
    stream.cancel()
    thread.join(timeout=120)
    assert not thread.is_alive() and verdicts == []
