"""Static checks and diagnosis: what kforge can say about a file without running it."""

from __future__ import annotations

import threading
import time

from conftest import SOLUTIONS
from evaluator import Status
from evaluator.diagnose import hint_for
from evaluator.static import check_source


def test_seed_sources_are_classified_before_any_compile():
    seeds = {p.parent.name + "/" + p.stem[:8]: check_source(p.read_text()) for p in SOLUTIONS.glob("*/seed_*.py")}
    assert seeds["matmul_maxpool_sum_scale/seed_003"].status is Status.TRUNCATED
    for name in ("avg_pool_1d/seed_000", "avg_pool_2d/seed_001", "conv1d/seed_002", "conv1d/seed_004"):
        assert seeds[name].status is None and seeds[name].needs_cuda


def test_cpu_extension_is_marked_cpu_only():
    check = check_source((SOLUTIONS / "scale_bias_hardswish/cpu_fused_o3.py").read_text())
    assert check.status is None and check.cpu_only and not check.needs_cuda


def test_missing_model_new_and_broken_syntax():
    assert check_source("x = 1\n").status is Status.INVALID
    assert check_source("def f(:\n").status is Status.SYNTAX_ERROR
    assert check_source("from elsewhere import ModelNew\n").status is None


def test_prose_is_no_candidate_code_that_fails_to_parse_is_a_syntax_error_and_cut_off_code_truncated():
    """A file of prose has no line of code (its first apostrophe opens a "string"): not a candidate at all; code
    that does not parse is one with a syntax error; a cut-off file leaves open what its code began."""
    prose = check_source("Here is my kernel. It's fast: it uses shared memory.\n")
    assert prose.status is Status.INVALID and prose.cause.startswith("no line of Python code (prose?)")
    broken = check_source("import torch\nclass ModelNew(:\n    pass\n")
    assert broken.status is Status.SYNTAX_ERROR and broken.cause.endswith("(line 2 of 3)"), broken.cause
    assert check_source("import torch\nclass ModelNew(:\n").cause.endswith("(line 2 of 2)")  # a last newline is no line
    assert check_source("import torch\nx = load_inline(name='a',\n    cpp_sources='x'").status is Status.TRUNCATED


def test_hints_name_the_seed_failures():
    assert "CUDAContext.h" in hint_for('cuda.cu(38): error: namespace "at::cuda" has no member "getCurrentCUDAStream"')
    assert "cpp_sources" in hint_for("TypeError: load_inline() missing 1 required positional argument: 'cpp_sources'")
    assert "extension module itself" in hint_for("TypeError: 'module' object is not callable")
    assert "32-bit index overflow" in hint_for("CUDA error: an illegal memory access was encountered", 2**32)
    assert hint_for("CUDA error: an illegal memory access was encountered", 1000) == ""
    binding = "main.cpp:4:50: error: 'f' was not declared in this scope\n    4 | m.def(\"f\", torch::wrap_pybind_function(f));"
    assert "cpp_sources" in hint_for(binding)
    assert hint_for("main.cpp:11:25: error: 'n' was not declared in this scope\n   11 |     for (i = 0; i < n; ++i)") == ""


class _Finalised:
    """A cycle whose finaliser switches threads: the collector runs it in the middle of whatever allocates."""

    def __init__(self):
        self.me = self

    def __del__(self):
        time.sleep(0)


def test_sources_parse_in_many_threads_at_once():
    """The loop extracts answers in worker threads while it judges others; CPython 3.11's AST builder shares its
    recursion depth between threads (SystemError 'AST constructor recursion depth mismatch' seen in CI)."""
    source, failures = (SOLUTIONS / "scale_bias_hardswish/cpu_fused_o3.py").read_text(), []

    def parse_many():
        for _ in range(300):
            [_Finalised() for _ in range(50)]
            try:
                assert check_source(source).status is None
            except Exception as exc:  # noqa: BLE001 - any failure in a thread is the finding
                failures.append(exc)
                return

    threads = [threading.Thread(target=parse_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_a_file_that_can_run_no_kernel_of_its_own_is_known_before_anything_runs(tmp_path, cpu_settings):
    """Plain PyTorch in ModelNew: the no_custom_kernel cheat from the code alone, with no reference run first.
    Anything that could load or make a kernel (a module of its own, a shared library, code made at run time)
    leaves the judgement to the run."""
    from evaluator import CandidateJob, evaluate
    from reference_problems import resolve_problem

    plain = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
    assert check_source(plain).kernel_free
    for loads in ("import ctypes\n", "from . import kernels\n", "import my_kernels\n", "torch.ops.load_library('k.so')\n",
                  "exec(open('k.py').read())\n", "f = __import__('kernels')\n"):
        assert not check_source(loads + plain).kernel_free, loads
    assert not check_source(plain, "cuda").kernel_free  # judged as a language: the run decides
    path = tmp_path / "plain.py"
    path.write_text(plain)
    (verdict,) = evaluate([CandidateJob(path=path, problem=resolve_problem("relu"))], cpu_settings)
    assert (verdict.status, verdict.evidence.exploit, verdict.evidence.stage) == (Status.CHEAT, "no_custom_kernel", "parse")
    assert "before anything ran" in verdict.evidence.cause and not verdict.evidence.stage_s


def test_the_gpu_suites_candidates_are_not_judged_from_their_code_alone():
    """The CUDA attacks and their honest twin are meant to be run: one the code alone decides (no ModelNew,
    nothing of its own that could run, a CPU-only extension skipped on a GPU) would pass or fail a GPU test for a
    reason the test is not about."""
    from conftest import ROOT

    files = [*(ROOT / "tests" / "adversarial" / "cuda").glob("*.py"),
             *(ROOT / "tests" / "candidates" / "relu_scale_add").glob("*_cuda.py")]  # as the GPU test names them
    assert len(files) >= 5
    for path in files:
        check = check_source(path.read_text())
        assert check.status is None and not check.kernel_free and not check.cpu_only, (path.name, check)
