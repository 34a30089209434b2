"""The evaluator end to end on CPU: every status from a real child process, most from a real compiled extension."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from conftest import CANDIDATES, SOLUTIONS
from evaluator import CandidateJob, EvalSettings, Limits, Status, Verdict, evaluate
from reference_problems import resolve_problem

HARDSWISH = SOLUTIONS / "scale_bias_hardswish"
TEST_HARDSWISH = CANDIDATES / "scale_bias_hardswish"


@pytest.fixture(scope="session")
def verdicts(cpu_settings, tmp_path_factory) -> dict[str, Verdict]:
    """One batch, as `kforge evaluate` runs it: compiles in parallel, then each candidate alone."""
    scratch = tmp_path_factory.mktemp("static")
    (scratch / "invalid.py").write_text("import torch\n\nclass Model:\n    pass\n")
    (scratch / "syntax_error.py").write_text("class ModelNew(:\n    pass\n")
    problem = resolve_problem("scale_bias_hardswish")
    paths = [HARDSWISH / f"{n}.py" for n in ("cpu_fused_o3", "cpu_wrong", "cpu_compile_error", "cpu_runtime_error")]
    paths += [TEST_HARDSWISH / "cpp_leak.py", TEST_HARDSWISH / "py_segfault.py", scratch / "invalid.py", scratch / "syntax_error.py"]
    jobs = [CandidateJob(path=p, problem=problem) for p in paths]
    jobs += [CandidateJob(path=SOLUTIONS / "matmul_maxpool_sum_scale/seed_003_0cc791c157c69bb6.py",
                          problem=resolve_problem("matmul_maxpool_sum_scale")),
             CandidateJob(path=SOLUTIONS / "avg_pool_2d/seed_001_a73418884c619a93.py", problem=resolve_problem("avg_pool_2d"))]
    return {Path(v.solution_path).stem: v for v in evaluate(jobs, cpu_settings)}


def test_every_job_gets_exactly_one_verdict(verdicts):
    assert len(verdicts) == 10


def test_fused_cpp_kernel_is_correct_and_faster_than_eager(verdicts):
    v = verdicts["cpu_fused_o3"]
    assert v.status is Status.CORRECT, v.evidence
    assert v.evidence.max_abs_err is not None and v.evidence.max_abs_err <= 1e-4
    assert v.candidate.reps >= 10 and v.reference.reps >= 10
    # the median of paired ratios: near the ratio of the two medians (the reference's timed beside the candidate)
    assert v.speedup == pytest.approx(v.reference.median_ms / v.candidate.median_ms, rel=0.15)
    assert v.speedup > 1.0, (v.candidate, v.reference)
    assert v.evidence.compile_s is not None and v.device_name


def test_a_correct_verdict_says_how_it_was_timed(verdicts):
    v = verdicts["cpu_fused_o3"]
    t = v.evidence.timing
    assert (t.calls, t.reference_calls, t.cpu_threads) == (v.candidate.reps, v.reference.reps, 1)
    assert t.l2_flush.endswith("MiB written before every timed call (twice the largest CPU cache)"), t.l2_flush
    assert t.untimed_calls >= 4 and t.fresh_inputs.startswith("fresh: new values before every call")
    assert t.checked_calls and all(0 <= rep < t.calls for rep in t.checked_calls)  # drawn by the parent, and the last
    low, high = t.speedup_interval
    assert low <= v.speedup <= high and f"x vs eager (95 %: {low:.3g}-{high:.3g}x)" in v.evidence.cause
    assert t.interval.startswith("the median of") and "paired ratios" in t.interval and t.reference_calls == t.calls
    assert "this pair of processes only" in t.interval  # what the interval does not cover on CPU
    assert t.floor.startswith("none: no FLOPs counted")  # element-wise, and a CPU has no bandwidth bound


def test_evidence_says_where_the_time_went(verdicts):
    """Per-stage wall seconds (parent's clock) and, for a fresh build, ninja's seconds per step."""
    v = verdicts["cpp_leak"]  # built only by this batch: not a cache hit
    assert v.evidence.cache_hit is False and v.evidence.build_steps_s["main.o"] > 1.0, v.evidence.build_steps_s
    assert v.evidence.build_steps_s["main.o"] < v.evidence.stage_s["compile_child"]
    # device_wait is there only when another kforge process held the CPU meanwhile (leases.py)
    stages = verdicts["cpu_fused_o3"].evidence.stage_s
    reference = ["reference_start", "reference_setup", "reference_init", "reference_correctness", "reference_quiet",
                 "reference_timing", "reference_timed", "reference_footprint", "reference_serving"]  # the reference child's stages, request to ready
    assert [s for s in stages if s != "device_wait"] == ["compile_child", "reference_wait", "reference_run", "reference_load", *reference, "load", "start",
                            "setup", "compile", "init",
                            "correctness", "leak", "timing", "judge", "of_which_comparer",
                            "of_which_comparer_work", "of_which_comparer_recompute", "of_which_reference_blocks"]
    # timing: kforge's own clocking of both sides, the reference's blocks among it
    assert 0 < stages["of_which_comparer"] < stages["correctness"] + stages["timing"]
    # the comparer's own work is within the round trips
    assert 0 <= stages["of_which_comparer_recompute"] < stages["of_which_comparer_work"] < stages["of_which_comparer"]
    assert 0 < stages["of_which_reference_blocks"] < stages["timing"]
    assert sum(stages[k] for k in reference) == pytest.approx(stages["reference_run"], abs=0.01)
    timed = verdicts["cpu_fused_o3"].candidate
    assert all(s >= 0 for s in stages.values()), stages
    assert stages["timing"] >= timed.reps * timed.min_ms / 1e3  # holds every sample
    assert stages["load"] > 0 and stages["reference_load"] > 0  # fork (or interpreter), jail: before any request
    child = sum(s for k, s in stages.items() if k not in ("compile_child", "reference_wait", "judge", "load", "device_wait")
                and not k.startswith(("reference", "of_which")))
    assert child == pytest.approx(verdicts["cpu_fused_o3"].wall_s - stages["compile_child"], abs=0.01)
    # one reference run per problem, on the critical path of whichever candidate of it came first
    ran = [v.evidence.stage_s for v in verdicts.values() if v.problem == "scale_bias_hardswish" and "reference_run" in v.evidence.stage_s]
    assert len(ran) >= 3 and len({s["reference_run"] for s in ran}) == 1
    assert max(s["reference_wait"] for s in ran) >= ran[0]["reference_run"] > 0


def test_wrong_kernel_is_incorrect_with_where_and_how_much(verdicts):
    v = verdicts["cpu_wrong"]
    assert v.status is Status.INCORRECT
    m = v.evidence.mismatch
    assert m.max_abs_err > 1e-4 and len(m.worst_index) == 2 and 0 < m.bad_fraction <= 1
    assert m.expected != m.got
    assert v.speedup is None and v.candidate is None


def test_compile_error_carries_the_compiler_line(verdicts):
    v = verdicts["cpu_compile_error"]
    assert v.status is Status.COMPILE_ERROR
    assert "error:" in v.evidence.cause and "cannot convert" in v.evidence.cause
    assert "main.cpp:" in v.evidence.cause and "/main.cpp" not in v.evidence.cause  # the build dir is in the log only
    assert "/main.cpp" in v.evidence.log_tail and v.evidence.stage == "compile"


def test_a_compile_error_is_remembered_for_the_same_source_and_toolchain(verdicts, cpu_settings):
    """The second batch gets the same verdict, with the compiler's line, without compiling again."""
    import time

    job = CandidateJob(path=HARDSWISH / "cpu_compile_error.py", problem=resolve_problem("scale_bias_hardswish"))
    started = time.monotonic()
    (again,) = evaluate([job], cpu_settings)
    assert time.monotonic() - started < 5.0  # a compile of it takes ~15 s here
    first = verdicts["cpu_compile_error"]
    assert (again.status, again.evidence.cause, again.evidence.log_tail) == (first.status, first.evidence.cause, first.evidence.log_tail)


def test_a_finished_build_needs_no_compile_child(verdicts, cpu_settings):
    """Warm: the parent knows the key built (its own record, outside the child-writable build dir), so the
    candidate child loads the library itself and the verdict stands."""
    job = CandidateJob(path=TEST_HARDSWISH / "cpp_leak.py", problem=resolve_problem("scale_bias_hardswish"))
    (again,) = evaluate([job], cpu_settings)
    assert again.status is verdicts["cpp_leak"].status is Status.LEAK, again.evidence.cause
    assert again.evidence.stage_s["compile_child"] == 0.0 and again.evidence.cache_hit is True
    assert verdicts["cpp_leak"].evidence.stage_s["compile_child"] > 1.0  # built only by the first batch
    assert again.evidence.stage_s["compile"] < 5.0  # loaded, not compiled, in the candidate child


def test_exception_in_forward_is_a_runtime_error_with_traceback(verdicts):
    v = verdicts["cpu_runtime_error"]
    assert v.status is Status.RUNTIME_ERROR
    assert "expected a (batch, seq, dim) input" in v.evidence.cause
    assert "Traceback" in v.evidence.log_tail and v.evidence.stage == "correctness"


def test_memory_kept_per_call_is_a_leak(verdicts):
    v = verdicts["cpp_leak"]
    assert v.status is Status.LEAK
    assert v.evidence.leaked_bytes["host_rss"] >= 30 * 2**20  # 10 calls x 4 MiB


def test_child_killed_by_a_signal_is_reported_not_raised(verdicts):
    v = verdicts["py_segfault"]
    assert v.status is Status.RUNTIME_ERROR
    assert "SIGSEGV" in v.evidence.cause


def test_static_failures_cost_no_compile(verdicts):
    assert verdicts["invalid"].status is Status.INVALID
    assert verdicts["syntax_error"].status is Status.SYNTAX_ERROR
    truncated = verdicts["seed_003_0cc791c157c69bb6"]
    assert truncated.status is Status.TRUNCATED and "unterminated" in truncated.evidence.cause
    for name in ("invalid", "syntax_error", "seed_003_0cc791c157c69bb6"):
        assert verdicts[name].evidence.compile_s is None


def test_cuda_candidate_without_a_gpu_is_skipped(verdicts):
    v = verdicts["seed_001_a73418884c619a93"]
    assert v.status is Status.SKIPPED and "no CUDA device" in v.evidence.cause


def test_hanging_candidate_times_out(cpu_settings):
    settings = cpu_settings.model_copy(update={"limits": Limits(timeout_s=20)})
    job = CandidateJob(path=TEST_HARDSWISH / "py_timeout.py", problem=resolve_problem("scale_bias_hardswish"))
    (v,) = evaluate([job], settings)
    assert v.status is Status.TIMEOUT and "correctness" in v.evidence.cause


def test_scratch_space_is_removed(cpu_settings, tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    job = CandidateJob(path=TEST_HARDSWISH / "py_segfault.py", problem=resolve_problem("scale_bias_hardswish"))
    assert [v.status for v in evaluate([job], cpu_settings)] == [Status.RUNTIME_ERROR]
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name", ["relu", "avg_pool_2d", "matmul"])
def test_inputs_are_made_on_the_evaluation_device(name):
    """Inputs must be born on the target device (a 17 GB input never touches host memory); the meta device
    stands in for CUDA here, since both go through the same device context."""
    from evaluator.child.loading import load_problem
    from evaluator.child.trials import make_inputs

    problem = load_problem(resolve_problem(name).path, {})
    assert {t.device.type for t in make_inputs(problem, 0, "meta")} == {"meta"}


def test_outputs_cross_as_raw_bytes_and_a_rewritten_file_is_refused(tmp_path):
    """What a child saves is read back bit for bit, whatever the dtype or shape (non-contiguous, 0-dim, empty,
    not a tensor); a file of any other size than its description is refused, not misread."""
    import torch

    from evaluator.child.correctness import load_outputs
    from evaluator.child.trials import save_outputs

    outputs = [torch.randn(3, 4).t(), torch.tensor(True), torch.arange(5, dtype=torch.int64), None,
               torch.randn(2, 0), torch.randn(7).half(), torch.tensor([1 + 2j], dtype=torch.complex64), 3]
    path = tmp_path / "out.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    meta = save_outputs(outputs, fd)
    back = load_outputs(str(path), meta)
    for got, sent in zip(back, outputs):
        if isinstance(sent, torch.Tensor):
            assert got.dtype == sent.dtype and got.shape == sent.shape and torch.equal(got, sent)
        else:
            assert got is None
    os.ftruncate(fd, os.fstat(fd).st_size - 1)
    os.close(fd)
    with pytest.raises(OSError, match="holds 110 bytes, not the 111 described"):
        load_outputs(str(path), meta)


def _child_with_torch_loaded() -> bool:
    """Is there an evaluator child (a process carrying a child's token: forked or exec'd, not the fork server,
    whose token is a placeholder of zeros) that has torch's library mapped?"""
    from evaluator.sandbox.spawn import TOKEN_VAR

    for proc in Path("/proc").glob("[0-9]*"):
        try:
            tokens = [v.split(b"=", 1)[1] for v in (proc / "environ").read_bytes().split(b"\0")
                      if v.startswith(TOKEN_VAR.encode() + b"=")]
            if tokens and tokens[0].strip(b"0") and "libtorch" in (proc / "maps").read_text():
                return True
        except OSError:
            continue
    return False


def test_a_child_is_given_a_device_only_once_it_is_loaded(cpu_settings, tmp_path):
    """A device goes only to a child that can use it: the gate is asked once the child said it is loaded (its
    interpreter, jail and torch are up), never while it loads -- on the H100 children and references still
    loading held the GPU 114 s of a 444 s warm level-1 batch. The gate then takes 2 s: the request, and the
    child's clock, wait for it."""
    import time

    from evaluator.parent.batch import Batch

    batch, asked = Batch(cpu_settings), []

    def gate() -> None:
        asked.append((time.monotonic(), _child_with_torch_loaded()))
        time.sleep(2.0)  # a device that becomes free later still
        asked.append((time.monotonic(), True))

    (tmp_path / "plain.py").write_text("import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n")
    try:
        result = batch.run("compile", resolve_problem("relu"), tmp_path / "w", tmp_path / "build", tmp_path / "plain.py", gate=gate)
    finally:
        shutil.rmtree(batch.root)
    assert result.returncode == 0 and result.last("compiled"), result.log_tail()
    loaded = result.arrival("loaded")
    assert loaded is not None and loaded <= asked[0][0] and asked[0][1]  # torch was mapped before the gate was asked
    assert result.started >= asked[1][0] and result.stage_seconds()["start"] < 1.5
    assert result.stage_seconds()["load"] == pytest.approx(loaded - result.spawned, abs=1e-3) and loaded > result.spawned


def test_compiles_at_once_are_bounded_by_the_hosts_available_memory(monkeypatch):
    """16 compiles asked on a 24 GB machine: what its memory holds beside the batch's own, at ~3.6 GB each."""
    from evaluator.sandbox import cgroups

    assert cgroups._available_mb() > 0  # this machine's /proc/meminfo is read
    monkeypatch.setattr(cgroups, "_available_mb", lambda: 24_000)
    assert cgroups.compile_plan(16, 2).slots == 4 and cgroups.compile_plan(2, 2).slots == 2
    monkeypatch.setattr(cgroups, "_available_mb", lambda: 2_000)
    assert cgroups.compile_plan(16, 2).slots == 1
    monkeypatch.setattr(cgroups, "_available_mb", lambda: None)
    assert cgroups.compile_plan(16, 2).slots == 16


def test_unasked_compiles_at_once_follow_the_cores_and_say_why(monkeypatch):
    from evaluator.sandbox import cgroups

    monkeypatch.setattr(cgroups, "_available_mb", lambda: 128_000)
    plan = cgroups.compile_plan(None, 16)
    assert plan.slots == 5 and plan.why.startswith("5 compiles at a time (16 cores left for compiles, 3 per compile; memory enough for 33:")
    assert cgroups.compile_plan(None, 16, "cpu").slots == 8
    assert cgroups.compile_plan(None, 1).slots == 1
    monkeypatch.setattr(cgroups, "_available_mb", lambda: 12_000)
    assert cgroups.compile_plan(None, 16).slots == 1


def test_on_cpu_the_timing_cores_are_left_out_of_the_compiles(monkeypatch):
    """16 cores, one timing the reference and the candidate: 15 left to compiles, 7 at a time; on a GPU all 16 (5 at a
    time: a .cu's front ends run side by side)."""
    from evaluator.parent import batch
    from evaluator.sandbox import cgroups

    monkeypatch.setattr(cgroups, "_available_mb", lambda: 128_000)
    monkeypatch.setattr(batch.os, "sched_getaffinity", lambda _pid: set(range(16)))
    cpu = batch.compile_plan(EvalSettings(device="cpu", cpu_threads=1))
    assert (cpu.slots, cpu.why.split(";")[0]) == (7, "7 compiles at a time (15 cores left for compiles, 2 per compile")
    assert batch.compile_plan(EvalSettings(device="cuda")).slots == 5
    assert batch.compile_plan(EvalSettings(device="cuda", jobs=3)).why.startswith("3 compiles at a time (--jobs 3;")
