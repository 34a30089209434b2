"""The speed of light (evaluator.contracts.SpeedOfLight): the judge reports the floor as numbers, refine prompts
show the hardware and how close the parent came, and the agent loop ends a problem once a kernel is close enough;
the loop runs against the scripted server on 127.0.0.1 with a real SQLite file."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from conftest import relu_timing_case
from db import Database
from evaluator import EvalSettings, Evidence, Status, TimingStats, Verdict
from evaluator.contracts import SpeedOfLight, TimingReport
from evaluator.hardware import device_name
from evaluator.verdict.speed import report
from fake_llm_server import FakeLLMServer, Reply, answer
from judging.record import record_verdict
from pipeline.extract import extract
from pipeline.llm import LLMSettings, OpenAIChat
from pipeline.loop import Loop, RunConfig
from prompts import render_feedback
from reference_problems import resolve_problem

SOL = SpeedOfLight(ms=0.641, bound="bandwidth", arithmetic="2.15e+09 bytes at 3.35e+12 B/s need 0.641 ms",
                   hardware="H100 SXM datasheet: 132 SMs, 3.35 TB/s, 67 TFLOP/s fp32, 989 TFLOP/s dense bf16")


def _judged(device: str, size: str, monkeypatch) -> TimingReport:
    """The timing report of a run of relu at 1.282 ms a call, on an 'H100' or this CPU."""
    return report(relu_timing_case([1.282] * 50, monkeypatch, device, size))


def test_the_judge_reports_the_floor_as_the_speed_of_light(monkeypatch):
    sol = _judged("cuda", "full", monkeypatch).speed_of_light
    assert (sol.bound, round(sol.ms, 3)) == ("bandwidth", 0.641) and sol.hardware.startswith("H100 SXM datasheet: 132")
    assert sol.arithmetic == "2.68e+08 FLOP at 9.89e+14 FLOP/s need 0.0002714 ms; 2.15e+09 bytes at 3.35e+12 B/s need 0.641 ms"
    assert sol.fraction(1.282) == pytest.approx(0.5, rel=1e-3)
    relu = resolve_problem("relu").meta
    assert (sol.bytes_moved, sol.flops) == (relu.bytes_moved, relu.flops)  # stored with the verdict, for the report
    cpu = _judged("cpu", "small", monkeypatch)  # no FLOPs counted (element-wise), declared for the full size only,
    # and a CPU has no bandwidth peak
    assert cpu.speed_of_light is None and cpu.floor.startswith("none: no FLOPs counted")


def _verdict(sha: str, sol: SpeedOfLight | None, median_ms: float = 1.282, where: str = "H100") -> Verdict:
    stats = lambda ms: TimingStats(median_ms=ms, mean_ms=ms, min_ms=ms, max_ms=ms, p20_ms=ms, p80_ms=ms,  # noqa: E731
                                   std_ms=0.0, cv=0.0, reps=50, method="cuda_events+l2_flush")
    return Verdict(status=Status.CORRECT, problem="relu", solution_sha256=sha, device="cuda", device_name=where,
                   size="full", candidate=stats(median_ms), reference=stats(2 * median_ms), speedup=2.0,
                   evidence=Evidence(timing=TimingReport(method="cuda_events+l2_flush", calls=50, speed_of_light=sol)))


def test_a_refine_prompt_shows_the_hardware_and_the_fraction_of_the_speed_of_light():
    text = render_feedback(_verdict("a" * 64, SOL), "class ModelNew: pass\n")
    assert ("The hardware: H100 SXM datasheet: 132 SMs, 3.35 TB/s, 67 TFLOP/s fp32, 989 TFLOP/s dense bf16. At those "
            "peaks one call needs at least 0.641 ms (2.15e+09 bytes at 3.35e+12 B/s need 0.641 ms): the speed of light, "
            "bandwidth-bound. Your kernel runs at 50% of it.") in text
    assert "speed of light" not in render_feedback(_verdict("a" * 64, None), "class ModelNew: pass\n")


def _run(database: Database, tmp_path: Path, code: str, sol_stop: float | None) -> tuple[list[dict], str | None]:
    """Three turns of one sample on relu, the server always answering `code` (judged before: nothing compiles)."""
    settings = EvalSettings(device="cpu", size="small", build_root=tmp_path / "builds")
    with FakeLLMServer(lambda body, i: Reply(content=answer(code, f"answer {i}"))) as server:
        provider = OpenAIChat(LLMSettings(base_url=server.url, model="fake-coder", api_key="k"))
        config = RunConfig(turns=3, out_dir=tmp_path / "out", sol_stop=sol_stop)
        result = Loop(provider, database, settings, config).run(resolve_problem("relu"))
    assert not result.errors, result.errors
    return server.requests, result.reached


@pytest.mark.parametrize(("sol_stop", "calls"), [(0.5, 1), (0.6, 3), (None, 3)])
def test_a_problem_is_done_once_a_kernel_reaches_the_configured_fraction(tmp_path, sol_stop, calls):
    """The answer was judged at 50 % of the speed of light on this machine (a stored verdict, reused)."""
    code = "import torch\nclass ModelNew(torch.nn.Module):\n    pass\n"
    sha = hashlib.sha256(extract(answer(code, "x"), "stop").code.encode()).hexdigest()  # the file the loop writes
    with Database(f"sqlite:///{tmp_path / 'kforge.db'}") as db:
        db.upsert_problem("relu", 1, str(resolve_problem("relu").path), "h")
        db.upsert_solution(sha, "relu", code, origin="generated")
        verdict = _verdict(sha, SOL, where=device_name("cpu")).model_copy(update={"device": "cpu", "size": "small"})
        problem = resolve_problem("relu")  # judged against this very file at the size that runs: it may stand
        verdict.evidence.problem_sha256, verdict.evidence.size = problem.sha256, problem.size_label("small")
        record_verdict(db, verdict)
        requests, reached = _run(db, tmp_path, code, sol_stop)
    assert len(requests) == calls
    if calls == 1:
        assert reached == f"{sha[:12]} runs at 50% of the speed of light (0.641 ms, bandwidth-bound)"
    else:
        assert reached is None and "Your kernel runs at 50% of it." in requests[1]["messages"][-1]["content"]
