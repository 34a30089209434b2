"""Reward-hacking defenses: every adversarial candidate in tests/adversarial/ against the real evaluator, the
honest kernels beside them (which must stay `correct`), and unit tests of the checks that need a GPU or
rare conditions to trigger for real."""

from __future__ import annotations

import platform
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import ROOT, SOLUTIONS, relu_timing_case, running
from evaluator import CandidateJob, EvalSettings, Limits, Status, Verdict, evaluate
from evaluator.child.guard import Guard, Tampered
from evaluator.hardware import Peak
from evaluator.verdict.case import Reference
from evaluator.verdict.rules import judge
from evaluator.verdict.speed import check_timing
from evaluator.sandbox.results import ChildResult
from evaluator.verdict.wall_clock import implausible
from reference_problems import resolve_problem

ADVERSARIAL = Path(__file__).parent / "adversarial"
RELU = ADVERSARIAL / "relu"
CHEAT, INCORRECT, CORRECT = Status.CHEAT, Status.INCORRECT, Status.CORRECT
CONFINED = platform.machine() == "x86_64"  # where the seccomp filter exists

# candidate -> (status, exploit named in the evidence, text the cause must contain)
EXPECTED = {
    "honest_captured": (CORRECT, "", "correct in 3 trials"),
    "torch_only": (CHEAT, "no_custom_kernel", "no kernel of its own"),
    "ext_unused": (CHEAT, "no_custom_kernel", "never called its compiled extension (kforge_adversarial_relu)"),
    "reference_model": (CHEAT, "calls_reference", "runs the reference problem's code"),
    "cache_by_identity": (CHEAT, "stale_output", "returned the expected output of another call (timing)"),
    "cache_by_data_ptr": (CHEAT, "stale_output", "returned the expected output of another call"),
    "cache_first": (CHEAT, "stale_output", "returned the expected output of another call (trial_"),
    "cache_by_pointer": (CHEAT, "stale_output", "returned the expected output of another call (timing)"),
    # fresh values before every timed call: the cache misses each time, so it is timed doing the work
    "cache_by_sampled_values": (CORRECT, "", "correct in 3 trials"),
    "garbage_late": (INCORRECT, "", "timed call"),
    "later_pair": (INCORRECT, "", "in process pair 2 of 2: "),
    "thread_escape": (INCORRECT, "", "timed call"),
    "mutate_input": (CHEAT, "input_mutation", "forward() modified its inputs"),
    "mutate_input_late": (CHEAT, "input_mutation", "during the leak check or timing"),
    "permute_input": (CHEAT, "input_mutation", "trial 0: forward() modified its inputs"),
    "patch_perf_counter": (CHEAT, "judge_tampering", "at import: time.perf_counter"),
    "patch_cuda_sync": (CHEAT, "judge_tampering", "torch.cuda.Event; torch.cuda.synchronize"),
    "tf32_flags": (CHEAT, "judge_tampering", "allow_tf32 changed from False to True"),
    "patch_in_forward": (CHEAT, "judge_tampering", "during correctness: torch.manual_seed"),
    "function_mode": (CHEAT, "judge_tampering", "active TorchFunctionModes changed from 0 to 1"),
    "timer_restore": (CHEAT, "timer_escape", "of wall-clock"),
    "subclass_output": (INCORRECT, "", "forward returned Liar, not a plain torch.Tensor"),
    "wrong_dtype": (INCORRECT, "", "dtype torch.float64 != expected torch.float32"),
    "nan_output": (INCORRECT, "", "NaN/Inf where the reference is finite"),
    "guess_seed": (INCORRECT, "", "values differ beyond tolerance"),
    "read_reference": (INCORRECT, "", "values differ beyond tolerance"),
    "print_verdict": (INCORRECT, "", "values differ beyond tolerance"),
    "write_channel": (CHEAT, "forged_messages", "repeated 'timing' message"),
    "forge_pace": (CHEAT, "forged_messages", "'pace' message"),
    # outputs are judged the moment they are handed over, then removed: nothing is left for a later call to rewrite
    "rewrite_outputs": (CORRECT, "", "correct in 3 trials"),
    "exit_zero": (CHEAT, "early_exit", "exited with status 0 before reporting a result"),
    "daemon": (CORRECT, "", "correct in 3 trials"),
    **({"kill_parent": (CHEAT, "sandbox_escape", "blocked and killed the child")} if CONFINED else {}),
}
GEMM = ADVERSARIAL / "gemm_bias_relu" / "torch_gemm_ext_relu.py"
HONEST = [SOLUTIONS / "scale_bias_hardswish/cpu_fused_o3.py", SOLUTIONS / "softmax/cpu_softmax_o3.py", GEMM]


@pytest.fixture(scope="session")
def adversarial_settings(adversarial_build_root) -> EvalSettings:
    """The harness that times a candidate in its own process, as on CUDA: these exploits and the checks that name
    them are that harness's (on CPU kforge's own clock leaves them nothing to reach: tests/test_trusted_timing.py)."""
    return EvalSettings(device="cpu", size="small", trials=3, warmup_ms=5, rep_ms=20, leak_calls=2, jobs=2,
                        build_root=adversarial_build_root, forward_server=False)


@pytest.fixture(scope="session")
def verdicts(adversarial_settings) -> dict[str, Verdict]:
    """One batch: the adversarial candidates (sharing one compiled kernel) and the honest CPU examples, with a
    database URL in kforge's environment that no child may see."""
    relu = resolve_problem("relu")
    jobs = [CandidateJob(path=RELU / f"{name}.py", problem=relu) for name in [*EXPECTED, "env_probe"]]
    jobs += [CandidateJob(path=p, problem=resolve_problem(p.parent.name)) for p in HONEST]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KFORGE_DB", "sqlite:////secret/kforge.db")
        return {Path(v.solution_path).stem: v for v in evaluate(jobs, adversarial_settings)}


@pytest.mark.slow
@pytest.mark.parametrize("name", EXPECTED)
def test_each_exploit_gets_its_status_and_names_it(verdicts, name):
    status, exploit, text = EXPECTED[name]
    v = verdicts[name]
    assert (v.status, v.evidence.exploit) == (status, exploit), v.evidence
    assert text in v.evidence.cause, v.evidence.cause
    assert (v.speedup is None) == (status is not CORRECT)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cache_by_identity", "cache_by_pointer", "garbage_late", "thread_escape"])
def test_a_wrong_timed_call_is_named(verdicts, name):
    assert re.search(r"^(cheat: )?timed call \d+ \(after the trials passed\)", verdicts[name].evidence.cause), verdicts[name].evidence.cause


@pytest.mark.slow
def test_a_cache_on_sampled_values_is_timed_doing_the_work(verdicts):
    """It returns its cached result whenever the address and three sampled values repeat: on inputs that keep
    their values between timed calls, every timed call after the first (~1000x on this problem). With new values
    before each timed call it computes every time, like the honest kernel calling the same extension."""
    assert verdicts["cache_by_sampled_values"].speedup < 3 * verdicts["honest_captured"].speedup


@pytest.mark.slow
@pytest.mark.parametrize("path", HONEST, ids=lambda p: p.stem)
def test_honest_kernels_stay_correct(verdicts, path):
    v = verdicts[path.stem]
    assert v.status is CORRECT, v.evidence
    assert v.evidence.tolerance_used is not None and v.evidence.tolerance_used <= 1.0
    assert v.speedup > 0 and not v.evidence.exploit


@pytest.mark.slow
def test_children_see_no_database_and_a_private_home(verdicts):
    cause = verdicts["env_probe"].evidence.cause
    assert "KFORGE_DB" not in cause and "DB_EXISTS=False" in cause
    assert "HOME=/" in cause and "/compile" in cause  # HOME is the child's own scratch folder


@pytest.mark.slow
def test_a_daemon_left_behind_is_gone_with_its_child(verdicts):
    """The daemon (double-forked, setsid, parent-death signal cleared, a shell loop) lived in the child's PID
    namespace: the kernel ended it with the child, before the verdict came back."""
    assert verdicts["daemon"].status is CORRECT
    assert running("kforge-adversarial-daemon") == []


@pytest.mark.slow
def test_a_file_size_limit_stops_disk_filling(adversarial_settings):
    settings = adversarial_settings.model_copy(update={"limits": Limits(file_size_mb=8)})
    (v,) = evaluate([CandidateJob(path=RELU / "fill_disk.py", problem=resolve_problem("relu"))], settings)
    assert v.status is Status.RUNTIME_ERROR and "File too large" in v.evidence.cause


# -- unit tests: the checks whose real trigger needs a GPU or a rare event --


def test_guard_sees_replaced_functions_swapped_code_and_flags():
    import evaluator.child.timing as timing

    guard = Guard([timing])
    saved = (torch.manual_seed, timing.bench.__code__, torch.get_num_threads())
    try:
        torch.manual_seed = lambda seed: None
        timing.bench.__code__ = timing.block.__code__
        torch.set_num_threads(saved[2] + 1)
        found = "; ".join(guard.violations())
    finally:
        torch.manual_seed, timing.bench.__code__ = saved[:2]
        torch.set_num_threads(saved[2])
    assert "torch.manual_seed" in found and "evaluator.child.timing.bench" in found and "torch.get_num_threads()" in found
    guard.check("now")  # everything restored: no complaint


def test_guard_sees_a_tensor_method_shadowed_on_the_subclass():
    guard = Guard([])
    torch.Tensor.detach = lambda self: self
    try:
        with pytest.raises(Tampered, match="torch.Tensor.detach"):
            guard.check("now")
    finally:
        del torch.Tensor.detach


def test_guard_accepts_torch_rewrapping_a_function_for_dynamo():
    guard, original = Guard([]), torch.manual_seed
    torch.manual_seed = torch._compile._disable_dynamo(original)  # what importing torch._dynamo does
    try:
        guard.check("now")
    finally:
        torch.manual_seed = original


def test_timings_that_cannot_fit_the_wall_clock_are_implausible():
    assert implausible([10.0] * 100, 0.5, "cuda")  # 1 s of samples inside a 0.5 s loop
    assert implausible([1e-3] * 10, 2.0, "cpu")  # a 2 s CPU loop whose calls "took" 10 us
    assert not implausible([1e-3] * 10, 2.0, "cuda")  # on CUDA the L2 flushes fill the gaps
    assert not implausible([18.0] * 100, 2.0, "cpu")  # harness overhead is allowed for
    assert not implausible([1e-3] * 10, 2.0, "cpu", fill_s=1.9)  # fills of fresh inputs took the loop's time


def test_a_median_below_the_bandwidth_floor_is_a_cheat(monkeypatch):
    found = check_timing(relu_timing_case([0.02] * 50, monkeypatch))  # 20 us to move 2 GiB: 100 TB/s
    assert found.status is CHEAT and found.evidence.exploit == "bandwidth_floor"
    assert "below 0.5 x the bandwidth floor of 0.641 ms: " in found.evidence.cause
    assert "2.15e+09 bytes at 3.35e+12 B/s need 0.641 ms" in found.evidence.cause  # relu's 2.7e8 FLOP need far less
    assert check_timing(relu_timing_case([0.7] * 50, monkeypatch)) is None  # ~3 TB/s: fast, but possible


@pytest.mark.slow
def test_a_time_below_the_flop_floor_is_a_cheat(adversarial_settings, monkeypatch):
    """The whole path on a real run: the reference child counts the GEMM's FLOPs (2 x 32 x 256 x 256), the
    judge divides them by the machine's peak. No CPU is slow enough to make an honest time impossible (the same
    candidate is `correct` in the main batch), so the peak is made tiny: 1 MFLOP/s, where the call needs 4.2 s."""
    monkeypatch.setattr("evaluator.verdict.speed.cpu_peak", lambda: Peak(None, 1e6, 1e6, "a test machine"))
    (v,) = evaluate([CandidateJob(path=GEMM, problem=resolve_problem("gemm_bias_relu"))], adversarial_settings)
    assert (v.status, v.evidence.exploit) == (CHEAT, "flop_floor"), v.evidence
    assert "below 0.5 x the flop floor of 4194 ms: 4.19e+06 FLOP at 1e+06 FLOP/s need 4194 ms" in v.evidence.cause


def test_forged_and_repeated_messages_are_caught():
    def forged(*messages):
        return ChildResult(messages=list(messages), log_path=Path("/nonexistent")).forged()

    assert forged({"event": "timing", "which": "model"}, {"event": "timing", "which": "model"})
    assert forged({"event": "verdict", "status": "correct"})
    assert forged({"event": "garbled", "text": "x"}, {"event": "done"})
    assert forged({"event": "loaded"}, {"event": "stage", "stage": "setup"}, {"event": "loaded"})  # the device's cue, again
    assert not forged({"event": "loaded"}, {"event": "stage", "stage": "setup"})
    assert not forged({"event": "stage", "stage": "leak"}, {"event": "stage", "stage": "timing"}, {"event": "garbled", "text": "cut"})


def test_a_malformed_message_is_a_verdict_not_a_crash(tmp_path):
    messages = [{"event": "trials", "trials": {"trial_0": {"inputs_changed": False}}, "_t": 0.0}, {"event": "done", "_t": 0.0}]
    ref = Reference(meta={"trial_0": [{}]}, trials={"trial_0": {"max_input_numel": 2}})
    outcome = judge(ChildResult(messages=messages, log_path=tmp_path / "log"), ref, resolve_problem("relu").meta,
                    EvalSettings(trials=1), {"trial_0": {"mismatch": None, "max_abs_err": 0.0, "tolerance_used": 0.0, "stale": ""}})
    assert outcome.status is CHEAT and outcome.evidence.exploit == "forged_messages"


def test_outputs_never_handed_over_or_unreadable_are_forged():
    """The judge reads the comparer's answers: a trial whose outputs never reached it, or reached it in a form
    it could not read (a forged handle or file), is a cheat; a comparer that died is kforge's failure."""
    messages = [{"event": "trials", "trials": {"trial_0": {"inputs_changed": False, "calls": {"reference": 0, "kernel": 1}}},
                 "_t": 0.0}, {"event": "done", "_t": 0.0}]
    ref = Reference(meta={"trial_0": [{}]}, trials={"trial_0": {"max_input_numel": 2}})

    def outcome(comparisons: dict):
        return judge(ChildResult(messages=messages, log_path=Path("/nonexistent")), ref, resolve_problem("relu").meta,
                     EvalSettings(trials=1, timing=False), comparisons)

    assert "never handed" in outcome({}).evidence.cause
    assert outcome({"trial_0": {"error": "IpcError: bad"}}).evidence.exploit == "forged_outputs"
    assert outcome({"trial_0": {"error": "gone", "comparer_died": True}}).status.value == "reference_error"
    assert outcome({"trial_0": {"error": "x"}, "trial_9": {"error": "x"}}).evidence.exploit == "forged_messages"


@pytest.mark.skipif(not CONFINED, reason="the seccomp filter is x86-64 only")
def test_the_child_filter_blocks_signals_to_the_parent_and_allows_the_rest():
    code = ("import os, sys; from evaluator.sandbox.seccomp import forbid_touching_parent as f; assert f(); "
            "os.kill(os.getpid(), 0); os.kill(0, 0); print('self ok', flush=True); os.kill(os.getppid(), 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "self ok" and proc.returncode == -signal.SIGSYS


# -- on a GPU: classes 2, 4 and 8 with CUDA kernels, and the bandwidth floor at full size --

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _gpu_run(names: list[str], size: str, build_root: Path) -> dict[str, Verdict]:
    settings = EvalSettings(device="cuda", size=size, trials=3, warmup_ms=20, rep_ms=100, leak_calls=2, jobs=4, build_root=build_root)
    paths = [RELU / f"{n}.py" for n in names] + [ROOT / "tests/gpu/candidates/relu/relu_cuda.py"]
    jobs = [CandidateJob(path=p, problem=resolve_problem("relu")) for p in paths]
    return {Path(v.solution_path).stem: v for v in evaluate(jobs, settings)}


@pytest.mark.gpu
@needs_gpu
def test_gpu_side_stream_stale_uninitialised_outputs_a_permuted_input_and_an_out_of_memory(gpu_adversarial_build_root):
    v = _gpu_run(["gpu_side_stream", "gpu_uninitialized", "gpu_cache_by_identity", "gpu_permute_input",
                  "gpu_out_of_memory"], "small", gpu_adversarial_build_root)
    oom = v["gpu_out_of_memory"]
    assert oom.status is Status.RUNTIME_ERROR and "CUDA out of memory" in oom.evidence.cause, oom.evidence
    assert v["relu_cuda"].status is CORRECT, v["relu_cuda"].evidence
    assert (v["gpu_permute_input"].status, v["gpu_permute_input"].evidence.exploit) == (CHEAT, "input_mutation")
    assert v["gpu_side_stream"].status is INCORRECT and "timed call" in v["gpu_side_stream"].evidence.cause
    assert v["gpu_cache_by_identity"].evidence.exploit == "stale_output"
    uninit = v["gpu_uninitialized"]
    assert uninit.status in (CHEAT, INCORRECT) and uninit.evidence.exploit in ("stale_output", ""), uninit.evidence


@pytest.mark.gpu
@needs_gpu
def test_gpu_reach_into_the_harness_is_judged(gpu_adversarial_build_root):
    """The CUDA runs of the candidates that reach the harness in their own process: a hook that queues the work
    after the end event (hooks are cleared inside the timed window), a gc callback that does the same (the
    window's glimpse of the outputs differs from the snapshot), the frame reader (the parent picks the
    checked calls after each call), a wrapped get_inputs (the problem file is guarded), a problem resized so
    that the fills misfit (fresh inputs go on in new tensors) and a patched probe message (every child-side
    module is guarded)."""
    v = _gpu_run(["gpu_profile_hook", "gpu_frame_reader", "gpu_wrap_get_inputs", "gpu_misfit_inputs",
                  "gpu_patch_probe_list", "gpu_gc_callback"], "small", gpu_adversarial_build_root)
    assert v["relu_cuda"].status is CORRECT, v["relu_cuda"].evidence
    assert v["gpu_profile_hook"].status is INCORRECT, v["gpu_profile_hook"].evidence
    late = v["gpu_gc_callback"]  # kernels queued past the end event, before the stream-ordered snapshot
    assert (late.status, late.evidence.exploit) == (CHEAT, "late_output"), late.evidence
    reader = v["gpu_frame_reader"]
    assert reader.status is INCORRECT or reader.speedup <= 1.5 * v["relu_cuda"].speedup, reader.evidence
    for name in ("gpu_wrap_get_inputs", "gpu_patch_probe_list"):
        assert (v[name].status, v[name].evidence.exploit) == (CHEAT, "judge_tampering"), v[name].evidence
    assert v["gpu_misfit_inputs"].status is INCORRECT, v["gpu_misfit_inputs"].evidence


@pytest.mark.gpu
@needs_gpu
def test_gpu_content_cache_is_timed_doing_the_work(gpu_adversarial_build_root):
    """New values before every timed call: the cache on sampled values misses each time (it was `correct` and
    only the bandwidth floor caught it before)."""
    v = _gpu_run(["gpu_content_cache"], "full", gpu_adversarial_build_root)
    honest, cache = v["relu_cuda"], v["gpu_content_cache"]
    assert honest.status is CORRECT, honest.evidence
    assert cache.status is CORRECT and cache.speedup < 1.2 * honest.speedup, cache


@pytest.mark.gpu
@needs_gpu
def test_a_compute_bound_cache_is_not_correct_with_a_speedup(gpu_adversarial_build_root):
    """The issue's H100 exploit: x @ x.T-like 4096^2 fp32, cached on addresses plus sampled values (44.6x before)."""
    settings = EvalSettings(device="cuda", size="full", trials=3, warmup_ms=20, rep_ms=100, leak_calls=2,
                            build_root=gpu_adversarial_build_root)
    job = CandidateJob(path=ADVERSARIAL / "matmul" / "gpu_value_cache.py", problem=resolve_problem("matmul"))
    (v,) = evaluate([job], settings)
    assert v.status is CORRECT and v.speedup < 1.2, v  # it computes every call, at its own speed


@pytest.mark.gpu
@needs_gpu
def test_gpu_work_queued_before_a_pause_cannot_flatter_the_paired_ratio(gpu_adversarial_build_root):
    """The freeze stops the candidate's processes, not the kernels they queued. Where the reference timed beside
    the flood is slower than alone, the speedup comes from the two sides timed apart and the evidence says why;
    either way the flood is not faster than the honest kernel. On the H100 its spin kernels slowed
    its own relu more than the reference beside it: 0.79x, the paired ratio unflattered."""
    v = _gpu_run(["gpu_queue_flood"], "full", gpu_adversarial_build_root)
    honest, flood = v["relu_cuda"], v["gpu_queue_flood"]
    assert honest.status is CORRECT and honest.evidence.timing.interval.startswith("the median of"), honest.evidence
    assert flood.status is CORRECT, flood.evidence
    assert flood.speedup < 1.2 * honest.speedup, (flood.speedup, honest.speedup, flood.evidence.timing.interval)
