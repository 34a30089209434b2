"""Triton candidates judged end to end on CPU, where their kernels run under Triton's interpreter: real children,
real compiles for a GPU target, the verdicts a user gets (tests/candidates/triton/, README there).

A representative subset of the honest candidates is judged in full (one elementwise, one reduction, one with a
`tl.dot`, one with a loop over a window, one with two kernels, one autotuned over two configs): each honest one
costs ~10 s of a 2-core machine (its own interpreter, the interpreted trials, the GPU-target compile), and the
others differ from these only in their kernels' arithmetic, which the interpreter runs the same way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("triton", reason="Triton candidates need the triton package (the dev extra installs it)")

from conftest import CANDIDATES, SOLUTIONS, kforge_runner  # noqa: E402
from evaluator import CandidateJob, EvalSettings, Status, Verdict, evaluate  # noqa: E402
from evaluator.languages import Language  # noqa: E402
from evaluator.parent.verdicts import INTERPRETED  # noqa: E402
from reference_problems import resolve_problem  # noqa: E402

TRITON = CANDIDATES / "triton"
HONEST = ["softmax", "matmul", "avg_pool_2d", "mlp"]
WRONG = ["layernorm/off_by_one_mask", "softmax/wrong_reduction", "scale_bias_hardswish/fp16_dtype"]
CPP = SOLUTIONS / "scale_bias_hardswish" / "cpu_fused_o3.py"


def _job(path: Path) -> CandidateJob:
    return CandidateJob(path=path, problem=resolve_problem(path.parent.name))


@pytest.fixture(scope="module")
def verdicts(build_root) -> dict[str, Verdict]:
    """One batch, as `kforge evaluate` runs it, Triton and C++ candidates together; no timing (the relu folder's
    test below times its correct ones)."""
    settings = EvalSettings(device="cpu", size="small", trials=3, timing=False, jobs=2, build_root=build_root, cpu_pairs=1)
    paths = [TRITON / name / "honest.py" for name in HONEST] + [TRITON / f"{name}.py" for name in WRONG] + [CPP]
    return {f"{Path(v.solution_path).parent.name}/{Path(v.solution_path).stem}": v
            for v in evaluate([_job(p) for p in paths], settings)}


@pytest.mark.parametrize("problem", HONEST)
def test_an_honest_triton_candidate_is_correct(verdicts, problem):
    v = verdicts[f"{problem}/honest"]
    assert v.status is Status.CORRECT, v.evidence
    assert v.evidence.language is Language.TRITON and v.speedup is None


@pytest.mark.parametrize("name", WRONG)
def test_a_wrong_triton_candidate_is_incorrect(verdicts, name):
    v = verdicts[name]
    assert v.status is Status.INCORRECT, v.evidence
    assert v.evidence.mismatch is not None and v.evidence.cause.startswith("trial "), v.evidence


def test_a_cpp_candidate_in_the_same_batch_is_judged_as_cpp(verdicts):
    v = verdicts["scale_bias_hardswish/cpu_fused_o3"]
    assert v.status is Status.CORRECT and v.evidence.language is Language.CPP, v.evidence


@pytest.fixture(scope="module")
def kforge(tmp_path_factory, build_root):
    return kforge_runner(tmp_path_factory.mktemp("relu"), build_root)


@pytest.fixture(scope="module")
def relu(kforge, tmp_path_factory) -> dict[str, dict]:
    """`kforge evaluate FOLDER --json` on these relu candidates (the hostile ones are test_triton_hostile.py's): the
    folder names the problem; correct ones are timed."""
    folder = tmp_path_factory.mktemp("triton") / "relu"
    folder.mkdir()
    for name in ("honest", "autotuned", "unlaunched", "torch_in_kernel", "unwrap_watch"):
        (folder / f"{name}.py").write_bytes((TRITON / "relu" / f"{name}.py").read_bytes())
    proc = kforge("evaluate", str(folder), "--device", "cpu", "--json")
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {Path(line["path"]).stem: line for line in lines}


def test_an_honest_relu_and_an_autotuned_one_are_correct_with_no_speedup_under_the_interpreter(relu):
    for name in ("honest", "autotuned"):  # two configs benchmarked on CPU by kforge's benchmarker
        line = relu[name]
        assert line["status"] == "correct", line
        assert line["speedup"] is None and line["candidate_ms"] is not None, line


def test_a_defined_but_unlaunched_kernel_is_no_custom_kernel(relu):
    line = relu["unlaunched"]
    assert line["status"] == "cheat", line
    assert "its Triton kernels (relu_kernel) never launched in trial 0" in line["cause"], line


def test_a_kernel_body_that_calls_torch_passes_the_interpreter_but_not_the_gpu_compile(relu):
    line = relu["torch_in_kernel"]
    assert line["status"] == "compile_error", line
    assert "relu_kernel does not compile for a GPU (sm_90)" in line["cause"] and "_relu_in_torch" in line["cause"], line


def test_unwrapping_the_watch_is_caught_by_the_guard(relu):
    line = relu["unwrap_watch"]
    assert line["status"] == "cheat", line
    assert "InterpretedFunction.run" in line["cause"], line


def test_the_stored_verdict_says_why_there_is_no_speedup(relu, kforge):
    text = " ".join(kforge("show", relu["honest"]["solution_sha256"][:12]).stdout.split())
    assert INTERPRETED.split(":")[0] in text and "language: triton" in text, text
