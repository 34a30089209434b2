"""Answers compiled on arrival (evaluator/parent/prebuild.py): the batch that judges them later starts no compile
child, and a key is compiled once at a time, whoever asks."""

from __future__ import annotations

import threading
import time

from conftest import SOLUTIONS
from evaluator import CandidateJob, Status, evaluate
from evaluator.parent import buildcache
from evaluator.parent.prebuild import Prebuilder
from reference_problems import resolve_problem

HARDSWISH = SOLUTIONS / "scale_bias_hardswish"


def _job(name: str) -> CandidateJob:
    return CandidateJob(path=HARDSWISH / f"{name}.py", problem=resolve_problem("scale_bias_hardswish"))


def test_answers_compiled_on_arrival_are_judged_without_a_compile_child(cpu_settings, tmp_path):
    settings = cpu_settings.model_copy(update={"build_root": tmp_path / "builds", "timing": False})
    fused, broken = _job("cpu_fused_o3"), _job("cpu_compile_error")
    with Prebuilder(settings) as early:
        built, failed = early.submit(fused), early.submit(broken)
        assert (built.result(timeout=900), failed.result(timeout=900)) == ("built", "failed")
    judged = {v.solution_path: v for v in evaluate([fused, broken], settings)}
    ok, error = judged[str(fused.path)], judged[str(broken.path)]
    assert ok.status is Status.CORRECT and ok.evidence.cache_hit is True, ok.evidence.cause
    assert ok.evidence.stage_s["compile_child"] == 0.0  # loaded from the cache by the candidate child
    assert error.status is Status.COMPILE_ERROR and "error" in error.evidence.cause  # the compile's record, kept
    assert error.evidence.stage_s.get("compile_child", 0.0) < 1.0


def test_a_key_is_compiled_by_one_at_a_time(tmp_path):
    build_dir = tmp_path / "builds" / "key"
    order: list[str] = []

    def second():
        with buildcache.compiling(tmp_path / "builds", build_dir):
            order.append("second")

    with buildcache.compiling(tmp_path / "builds", build_dir):
        waiter = threading.Thread(target=second)
        waiter.start()
        time.sleep(0.3)
        order.append("first done")
    waiter.join(timeout=10)
    assert order == ["first done", "second"]


def test_a_static_failure_compiles_nothing(cpu_settings, tmp_path):
    settings = cpu_settings.model_copy(update={"build_root": tmp_path / "builds"})
    prose = tmp_path / "prose.py"
    prose.write_text("Here is the kernel you asked for, it's fast.\n")
    with Prebuilder(settings) as early:
        assert early.submit(CandidateJob(path=prose, problem=resolve_problem("relu"))).result(timeout=60) == "static"
    assert not (tmp_path / "builds").exists() or not any((tmp_path / "builds").iterdir())
