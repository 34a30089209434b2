"""Hostile candidates aimed at kforge itself, not at a verdict: something else where the trusted side opens a child's
files (its outputs file: a FIFO, a lease; its log: a FIFO), the problem's comparer killed through its own outputs
file, a gigabyte line on the result pipe. Each real jailed candidate must get its own verdict within its own budget
and leave the candidates judged after it in the same batch as they are in a batch without it."""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from evaluator import CandidateJob, EvalSettings, Status, Verdict, evaluate
from evaluator.parent import references
from evaluator.parent.runner import run_budget
from evaluator.parent.stream import JobStream
from evaluator.protocol import Outputs
from evaluator.sandbox.results import MAX_LINE_BYTES, OVERSIZED, ChildResult, lines
from evaluator.verdict.case import Reference
from reference_problems import resolve_problem

RELU = Path(__file__).parent / "adversarial" / "relu"
CHEAT, CORRECT, RUNTIME_ERROR = Status.CHEAT, Status.CORRECT, Status.RUNTIME_ERROR


@pytest.fixture(scope="module")
def settings(adversarial_build_root) -> EvalSettings:
    return EvalSettings(device="cpu", size="small", trials=3, warmup_ms=5, rep_ms=20, leak_calls=2, jobs=2,
                        build_root=adversarial_build_root, cpu_pairs=1)


@pytest.fixture(scope="module")
def honest(tmp_path_factory) -> list[Path]:
    """Two honest candidates (copies of one, so each has its own verdict)."""
    folder = tmp_path_factory.mktemp("honest")
    return [Path(shutil.copy(RELU / "honest_captured.py", folder / f"honest_{i}.py")) for i in (0, 1)]


def in_turn(paths: list[Path], settings: EvalSettings) -> list[tuple[Verdict, float]]:
    """One batch of relu candidates judged one after another (a JobStream: each joins once the one before it is
    judged), so each attacker runs between honest candidates against the same comparer; each verdict with the
    seconds from its arrival to its verdict."""
    relu = resolve_problem("relu")
    stream = JobStream([relu])
    verdicts, judged = evaluate(stream, settings), []
    for path in paths:
        start = time.monotonic()
        stream.put(CandidateJob(path=path, problem=relu))
        judged.append((next(verdicts), time.monotonic() - start))
    stream.close()
    assert list(verdicts) == []
    return judged


def budget_s(v: Verdict, settings: EvalSettings) -> float:
    """The candidate's run budget, from its reference's own run as the verdict records it."""
    return references.run_budget_s(settings, Reference(meta={}, trials={}, run_s=v.evidence.stage_s["reference_run"]))


@pytest.fixture(scope="module")
def alone(honest, settings) -> list[tuple[Verdict, float]]:
    """The honest candidates in a batch of their own."""
    return in_turn(honest, settings)


@pytest.mark.slow
def test_a_fifo_for_an_outputs_file_is_forged_and_holds_up_no_other_candidate(honest, alone, settings):
    """A FIFO in place of its outputs file held the comparer in open() for the reference's whole limit: the
    planting candidate was a timeout at its budget, the next one of its problem `reference_error` 60 s later."""
    judged = in_turn([honest[0], RELU / "fifo_output.py", honest[1]], settings)
    (first, first_s), (fifo, fifo_s), (last, last_s) = judged
    assert (fifo.status, fifo.evidence.exploit) == (CHEAT, "forged_outputs"), fifo.evidence
    assert "a FIFO, not a regular file" in fifo.evidence.cause, fifo.evidence.cause
    assert [first.status, last.status] == [v.status for v, _ in alone] == [CORRECT, CORRECT]
    # what the planting candidate adds to the batch is less than its own budget
    assert first_s + fifo_s + last_s - sum(s for _, s in alone) < budget_s(fifo, settings)


class Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.said: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.said.append(record.getMessage())


@pytest.fixture(scope="module")
def attacked(honest, settings) -> dict:
    """One batch: the attackers one after another between the honest candidates, and what kforge warned of."""
    warned, log = Warnings(), logging.getLogger(references.__name__)
    log.addHandler(warned)
    try:
        names = ["lease_output", "truncate_outputs", "fifo_log"]
        judged = in_turn([honest[0], *(RELU / f"{name}.py" for name in names), honest[1]], settings)
    finally:
        log.removeHandler(warned)
    return {"verdicts": dict(zip(["first", *names, "last"], judged)), "warned": warned.said}


ATTACKS = {  # candidate -> (status, exploit, what the cause or the log says)
    # a write lease held a blocking open() for the kernel's lease-break-time, 45 s each call
    "lease_output": (CHEAT, "forged_outputs", "leased by another process"),
    # the comparer, killed by SIGBUS reading its mapping of a file that shrank, was dead for the rest of the batch
    "truncate_outputs": (CHEAT, "forged_outputs", "the outputs handed over cannot be read"),
    # the judge's read of its log, a FIFO with no writer left, waited forever: the batch never ended
    "fifo_log": (RUNTIME_ERROR, "", "then failed with its log a FIFO"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", ATTACKS)
def test_an_attack_on_kforge_gets_its_own_verdict_within_its_budget(attacked, settings, name):
    status, exploit, said = ATTACKS[name]
    v, took = attacked["verdicts"][name]
    assert (v.status, v.evidence.exploit) == (status, exploit), v.evidence
    assert said in v.evidence.cause + v.evidence.log_tail, v.evidence
    assert took < budget_s(v, settings), took


@pytest.mark.slow
def test_a_comparer_killed_through_an_outputs_file_is_replaced_before_the_next_candidate(attacked, alone):
    """The shrinking file kills the comparer (SIGBUS) in about one call of four here (it and the comparer share
    one core, so its reads rarely meet the file empty), and at most once: later files of that candidate are not
    read. The candidates after it are judged by a fresh comparer, as they are without it."""
    killed = [said for said in attacked["warned"] if "killed by SIGBUS" in said]
    assert len(killed) <= 1, attacked["warned"]
    verdicts = attacked["verdicts"]
    assert verdicts["fifo_log"][0].status is RUNTIME_ERROR  # its own verdict, not `reference_error`
    assert [verdicts["first"][0].status, verdicts["last"][0].status] == [v.status for v, _ in alone]


@pytest.mark.slow
def test_a_comparer_that_dies_under_an_honest_candidate_is_replaced_and_the_candidate_judged_again(
        honest, alone, settings, monkeypatch):
    """The comparer's processes are SIGKILLed (as the kernel's OOM killer would) as the honest candidate hands
    over its first outputs: a fresh comparer judges that call and the rest, and the verdict is the one it gets
    without the kill."""
    asked, killed = references.ReferenceServer.compare, []

    def compare(server, *args, **kwargs):
        if not killed:
            killed.extend(server.child.pids())
            for pid in killed:
                os.kill(pid, signal.SIGKILL)
        return asked(server, *args, **kwargs)

    monkeypatch.setattr(references.ReferenceServer, "compare", compare)
    ((v, _),) = in_turn(honest[:1], settings)
    assert killed
    assert v.status is alone[0][0].status is CORRECT, v.evidence


def test_each_request_to_the_comparer_is_bounded_by_the_candidates_own_budget():
    settings = EvalSettings()
    for run_s in (0.0, 2.5, 1e4):
        ref = Reference(meta={}, trials={}, run_s=run_s)
        assert references.run_budget_s(settings, ref) == run_budget(settings, ref).limits.timeout_s


def test_a_line_over_the_bound_is_not_read_and_ends_the_channel_as_a_forgery():
    """The reader stops at the bound and reads no further: the writer (a candidate writing a gigabyte) meets a
    closed pipe. The lines before it arrive as they were."""
    read, write = os.pipe()
    first = Outputs(which="trial_0", outputs=[]).model_dump_json().encode() + b"\n"
    ended: list[BaseException] = []

    def writer() -> None:
        try:
            os.write(write, first)
            for _ in range(64):  # 64 MiB, four times the bound
                os.write(write, b"x" * 2**20)
        except OSError as exc:
            ended.append(exc)
        finally:
            os.close(write)

    thread = threading.Thread(target=writer)
    thread.start()
    with os.fdopen(read, "rb") as fh:
        got = list(lines(fh))
    thread.join(timeout=10)
    assert got[0] == first and len(got) == 2 and OVERSIZED.encode() in got[1]
    assert ended and isinstance(ended[0], BrokenPipeError)
    result = ChildResult(messages=[{"event": "outputs", "which": "trial_0", "outputs": []},
                                   {"event": OVERSIZED, "text": "xxxx"}], log_path=Path("/nonexistent"))
    assert result.forged() == f"a line of over {MAX_LINE_BYTES:,} bytes, which kforge did not read: 'xxxx'"


def _peak_mb() -> int:
    return int(re.search(r"VmHWM:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) // 1024


@pytest.mark.slow
def test_a_gigabyte_line_on_the_result_pipe_is_forged_and_never_in_kforges_memory(honest, alone, settings):
    """Read whole, the line took kforge from 240 MB to a 3.2 GB peak, and the candidate 26 s."""
    rss_mb = int(re.search(r"VmRSS:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) // 1024
    Path("/proc/self/clear_refs").write_text("5")  # the peak starts again from here
    (first, _), (giant, took), (last, _) = in_turn([honest[0], RELU / "giant_line.py", honest[1]], settings)
    assert _peak_mb() - rss_mb < 256
    assert (giant.status, giant.evidence.exploit) == (CHEAT, "forged_messages"), giant.evidence
    assert f"a line of over {MAX_LINE_BYTES:,} bytes" in giant.evidence.cause, giant.evidence.cause
    assert took < budget_s(giant, settings)
    assert [first.status, last.status] == [v.status for v, _ in alone]
