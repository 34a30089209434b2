"""GPU behaviour of the evaluator, on real compiled CUDA extensions. Skipped cleanly without a CUDA device."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from evaluator import CandidateJob, EvalSettings, Status, evaluate
from reference_problems import resolve_problem

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

ROOT = Path(__file__).resolve().parents[2]
CANDIDATES = Path(__file__).parent / "candidates"


def _run(paths: list[Path], problem: str, size: str, tmp_path: Path) -> dict[str, object]:
    settings = EvalSettings(device="cuda", size=size, trials=2, warmup_ms=20, rep_ms=100, build_root=tmp_path / "builds", jobs=4)
    jobs = [CandidateJob(path=p, problem=resolve_problem(problem)) for p in paths]
    return {Path(v.solution_path).name: v for v in evaluate(jobs, settings)}


def test_raw_cudamalloc_per_call_is_a_leak_and_the_control_is_not(tmp_path):
    verdicts = _run([CANDIDATES / "relu" / "relu_cuda.py", CANDIDATES / "relu" / "relu_cuda_leak.py"], "relu", "small", tmp_path)
    assert verdicts["relu_cuda.py"].status is Status.CORRECT
    leak = verdicts["relu_cuda_leak.py"]
    assert leak.status is Status.LEAK
    assert leak.evidence.leaked_bytes["cuda_process_used"] >= 30 * 2**20  # 4 MiB x 10 calls


def test_missing_cuda_header_is_a_compile_error_with_its_cause(tmp_path):
    verdict = _run([ROOT / "solutions/avg_pool_1d/seed_000_124b30b2805dc00b.py"], "avg_pool_1d", "full", tmp_path)
    v = next(iter(verdict.values()))
    assert v.status is Status.COMPILE_ERROR
    assert "getCurrentCUDAStream" in v.evidence.cause
    assert "ATen/cuda/CUDAContext.h" in v.evidence.hint


def test_int32_overflow_poisons_only_its_own_child(tmp_path):
    """Seed 001 crashes the GPU context at 4.3e9 elements; its 64-bit repair in the same batch still passes."""
    folder = ROOT / "solutions/avg_pool_2d"
    verdicts = _run([folder / "seed_001_a73418884c619a93.py", folder / "repair_001_int64_index.py"], "avg_pool_2d", "full", tmp_path)
    seed = verdicts["seed_001_a73418884c619a93.py"]
    assert seed.status is Status.RUNTIME_ERROR
    assert "illegal memory access" in seed.evidence.cause
    assert "32-bit index overflow" in seed.evidence.hint
    assert verdicts["repair_001_int64_index.py"].status is Status.CORRECT


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_problems_spread_over_every_visible_gpu_each_on_one(tmp_path):
    """Two problems (relu, and a copy of its file: another problem to kforge), two copies of a correct kernel
    each: both GPUs run, and each problem's candidates run on the GPU its reference and comparer live on (its
    outputs never cross devices); each verdict names its GPU."""
    from evaluator.hardware import visible_gpus
    from reference_problems.registry import load_problem_file

    relu = resolve_problem("relu")
    other = tmp_path / "relu_again.py"
    other.write_text(relu.path.read_text() + "\n# the same problem, another file\n")
    jobs = []
    for key, problem in (("a", relu), ("b", load_problem_file(other))):
        for i in range(2):
            copy = tmp_path / f"{key}_copy_{i}.py"
            copy.write_text(f"{(CANDIDATES / 'relu' / 'relu_cuda.py').read_text()}\n# copy {i}\n")
            jobs.append(CandidateJob(path=copy, problem=problem))
    settings = EvalSettings(device="cuda", size="small", trials=2, warmup_ms=20, rep_ms=100, build_root=tmp_path / "builds", jobs=4)
    verdicts = list(evaluate(jobs, settings))
    assert {v.status for v in verdicts} == {Status.CORRECT}
    on = {key: {v.evidence.gpu for v in verdicts if Path(v.solution_path).name.startswith(key)} for key in "ab"}
    assert all(len(gpus) == 1 for gpus in on.values()) and set().union(*on.values()) == set(visible_gpus()[:2])


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_one_problem_runs_on_both_gpus_each_with_its_own_reference(tmp_path):
    """Four copies of a correct kernel of one problem: both GPUs run them (the second GPU serves the problem
    with a reference timed there), every one `correct`."""
    from evaluator.hardware import visible_gpus

    copies = []
    for i in range(4):
        copies.append(tmp_path / f"relu_copy_{i}.py")
        copies[-1].write_text(f"{(CANDIDATES / 'relu' / 'relu_cuda.py').read_text()}\n# copy {i}\n")
    verdicts = _run(copies, "relu", "small", tmp_path)
    assert {v.status for v in verdicts.values()} == {Status.CORRECT}
    assert {v.evidence.gpu for v in verdicts.values()} == set(visible_gpus()[:2])


@pytest.mark.parametrize("language, module", [("cute", "cutlass.cute"), ("tilelang", "tilelang")])
def test_a_dsl_kernel_of_its_own_must_launch(language, module, tmp_path):
    """The CuTe DSL's and TileLang's launch watches (evaluator/child/dsl_watch.py): the honest kernel is `correct`
    with its kernel named; its twin that compiles a kernel of its own and lets PyTorch do the work is caught."""
    pytest.importorskip(module)
    folder = ROOT / "tests/candidates" / language / "scale_bias_hardswish"
    verdicts = _run([folder / "honest.py", folder / "compiled_not_launched.py"], "scale_bias_hardswish", "small", tmp_path)
    honest, hostile = verdicts["honest.py"], verdicts["compiled_not_launched.py"]
    assert honest.status is Status.CORRECT, honest.evidence.cause
    assert honest.evidence.language == language
    assert (hostile.status, hostile.evidence.exploit) == (Status.CHEAT, "no_custom_kernel"), hostile.evidence.cause
    assert "never launched" in hostile.evidence.cause, hostile.evidence.cause


def test_a_reference_beside_a_candidate_never_overlaps_a_timed_window(tmp_path):
    """Six problems (copies of relu's file), a correct kernel each, on one GPU: the next problem's reference
    makes its outputs beside a candidate's last stages at least once, and on the parent's clock no reference's
    run overlaps another problem's candidate's timed loop, no reference's own timing overlaps any candidate's
    run, and no two candidates run at once."""
    import sys

    from evaluator.hardware import visible_gpus
    from reference_problems.registry import load_problem_file

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import hold_trace

    relu, jobs = resolve_problem("relu"), []
    for i in range(6):
        copy = tmp_path / f"relu_{i}.py"
        copy.write_text(relu.path.read_text() + f"\n# problem {i}\n")
        kernel = tmp_path / f"kernel_{i}.py"
        kernel.write_text((CANDIDATES / "relu" / "relu_cuda.py").read_text())
        jobs.append(CandidateJob(path=kernel, problem=load_problem_file(copy)))
    settings = EvalSettings(device="cuda", size="small", trials=2, warmup_ms=20, rep_ms=100, build_root=tmp_path / "builds",
                            jobs=4, gpus=visible_gpus()[:1])
    with hold_trace.Trace() as trace:
        verdicts = list(evaluate(jobs, settings))
    assert {v.status for v in verdicts} == {Status.CORRECT}
    assert any(op == "join" for _, op, _, _ in trace.holds), trace.holds

    def at(child: dict, step: str) -> float:
        return next(t for t, name in child["steps"] if name == step)

    def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
        return max(a[0], b[0]) < min(a[1], b[1])

    problem_of = {f"cand{i:05d}": job.problem.sha256[:16] for i, job in enumerate(jobs)}
    refs = [c for c in trace.children if "/ref/" in c["dir"] and c["started"] and any(n == "ready" for _, n in c["steps"])]
    cands = [c for c in trace.children if Path(c["dir"]).name in problem_of]
    assert len(refs) == len(cands) == 6
    for cand in cands:
        # the parent ends the rounds as it reads the last pace (its round's samples), before the child says so
        timed = (at(cand, "stage:timing"), max(t for t, name in cand["steps"] if name.startswith("pace")))
        run = (cand["started"], at(cand, "done"))
        for ref in refs:
            if not Path(ref["dir"]).name.startswith(problem_of[Path(cand["dir"]).name]):
                assert not overlap((ref["started"], at(ref, "ready")), timed), (cand["dir"], ref["dir"])
            assert not overlap((at(ref, "stage:timing"), at(ref, "ready")), run), (cand["dir"], ref["dir"])
        for other in cands:
            if other is not cand:
                assert not overlap(run, (other["started"], at(other, "done"))), (cand["dir"], other["dir"])
