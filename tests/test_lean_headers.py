"""The lean torch headers for a load_inline .cu: which sources get them, and, with the real nvcc, that a source
needing more than the lean set still builds (with torch's full headers) and loads again without a rebuild."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch.utils.cpp_extension as cpp_extension

from evaluator.build import lean_headers
from evaluator.child.loading import build_steps

ROOT = Path(__file__).resolve().parent.parent
SET = ROOT / "benchmarks" / "compile_set"


def test_sources_that_need_the_full_headers_are_named():
    assert lean_headers.why_full((SET / "softmax_rows.cu").read_text(), []) is None
    assert lean_headers.why_full((SET / "relu_dispatch.cu").read_text(), ["-O3", "--use_fast_math"]) is None
    assert lean_headers.why_full("#include <torch/extension.h>\nPYBIND11_MODULE(m, x) {}", []) == "uses PYBIND11_MODULE"
    assert lean_headers.why_full("auto t = torch::tensor({1.0, 2.0});", []) == "uses torch::tensor"
    assert lean_headers.why_full("#include <torch/torch.h>\n", []) == "includes torch/torch.h"
    assert lean_headers.why_full("", ["-O3", "-I/tmp/x"]) == "its nvcc flags set -I/tmp/x"


def test_the_lean_header_holds_each_operator_called_and_no_other():
    source = (SET / "matmul_tiled.cu").read_text() + "\nauto z = at::matmul(a, b);"
    text = lean_headers.lean_header(lean_headers.operators_called(source))
    ops = [line for line in text.splitlines() if line.startswith("#include <ATen/ops/")]
    assert ops == ["#include <ATen/ops/matmul.h>", "#include <ATen/ops/zeros.h>"]
    assert lean_headers.operators_called("using namespace torch;\nauto y = empty_like(x); int n = max(a, b);") == ["empty_like", "max"]
    assert lean_headers.operators_called("auto y = empty_like(x);") == []


_LOAD = """
import json, os, sys
import torch.utils.cpp_extension as cpp_extension
from evaluator.build import lean_headers, nvcc_driver, precompiled
cpp_extension.CUDA_HOME = cpp_extension.CUDA_HOME or os.environ["CUDA_HOME"]  # a CPU torch: nvcc builds the .cu object
binding = json.loads(sys.argv[3])
if binding:  # the binding's header as the parent publishes it, and the wrapper as a child installs it (evaluator/child/main.py)
    root = os.path.dirname(sys.argv[2])
    precompiled.ensure_directory(precompiled.variant(root, None, True, binding=True))
    precompiled.Headers(root).install()
lean_headers.install()
nvcc_driver.install()
try:
    cpp_extension.load_inline(name="lean_probe", cpp_sources=binding.get("declared", ""), cuda_sources=open(sys.argv[1]).read(),
                              functions=binding.get("functions"), build_directory=sys.argv[2])
except Exception:  # CPU torch: the link fails after the objects are built; CUDA torch: no module to import
    pass
print(json.dumps(lean_headers.builds + precompiled.builds))
"""


def _load(source: Path, build: Path, binding: dict | None = None) -> list[str]:
    """load_inline in a fresh process, as a compile child and then the candidate's child call it."""
    cuda_home = str(Path(shutil.which("nvcc")).resolve().parent.parent)
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])  # the GPU check's packages too
    env = {**os.environ, "PYTHONPATH": path, "TORCH_CUDA_ARCH_LIST": "9.0", "CUDA_HOME": os.environ.get("CUDA_HOME", cuda_home)}
    out = subprocess.run([sys.executable, "-c", _LOAD, str(source), str(build), json.dumps(binding or {})], env=env,
                         capture_output=True, text=True, timeout=900)
    return json.loads(out.stdout.strip().splitlines()[-1])


needs_nvcc = pytest.mark.skipif(not shutil.which("nvcc") and not os.environ.get("KFORGE_REQUIRE_NVCC"),
                                reason="no nvcc on PATH (CI sets KFORGE_REQUIRE_NVCC: there it must run)")


@needs_nvcc
def test_a_source_needing_more_than_the_lean_set_builds_with_the_full_headers_and_loads_without_a_rebuild(tmp_path):
    build = tmp_path / "build"
    build.mkdir()
    said = _load(SET / "conv_indexing.cu", build)
    assert len(said) == 1 and said[0].startswith("full: the lean build failed (cuda.cu(") and "Slice" in said[0], said
    assert (build / "cuda.cuda.o").exists()
    ninja = (build / "build.ninja").read_text()
    assert lean_headers.DIRECTORY not in ninja  # the object on disk is the full build's
    built = build_steps(build)["cuda.cuda.o"]
    assert _load(SET / "conv_indexing.cu", build) == said  # the candidate's child: the same build, from the marker
    assert build_steps(build)["cuda.cuda.o"] == built and (build / "build.ninja").read_text() == ninja


@needs_nvcc
def test_a_plain_kernel_builds_lean(tmp_path):
    build = tmp_path / "build"
    build.mkdir()
    assert _load(SET / "softmax_rows.cu", build) == ["lean"]
    assert (build / "cuda.cuda.o").exists()
    ninja = (build / "build.ninja").read_text()
    assert f"-I{build / lean_headers.DIRECTORY}" in ninja
    assert "nvcc_driver.py" in ninja.split("nvcc = ", 1)[1].splitlines()[0]  # nvcc's front ends side by side


@pytest.mark.gpu
@pytest.mark.skipif(not (Path(cpp_extension.include_paths()[0]) / "c10/cuda/impl/cuda_cmake_macros.h").exists(),
                    reason="torch's CPU build has no c10/cuda headers to compile against (the GPU check runs it)")
def test_a_launcher_taking_only_the_stream_builds_against_the_lean_cuda_context(tmp_path):
    """relu_dispatch.cu includes ATen/cuda/CUDAContext.h for at::cuda::getCurrentCUDAStream: it compiles against
    the lean header's CUDA context (no cuBLAS, cuSPARSE, cuSOLVER or ATen/Context.h), found before torch's."""
    build = tmp_path / "build"
    build.mkdir()
    assert _load(SET / "relu_dispatch.cu", build) == ["lean"]
    assert (build / "cuda.cuda.o").exists()
    assert (build / lean_headers.DIRECTORY / "ATen" / "cuda" / "CUDAContext.h").read_text() == lean_headers.CONTEXT


def test_a_source_using_more_of_the_cuda_context_keeps_torchs():
    stream = (SET / "relu_dispatch.cu").read_text()
    assert lean_headers.lean_context(stream)
    assert not lean_headers.lean_context(stream.replace("#include <ATen/cuda/CUDAContext.h>", ""))
    for use in ("cublasHandle_t h = at::cuda::getCurrentCUDABlasHandle();", "auto* a = at::cuda::getCUDADeviceAllocator();",
                "at::globalContext().alertNotDeterministic(\"x\");"):
        assert not lean_headers.lean_context(stream + use), use
    assert lean_headers.lean_context(stream + "#define CHECK_CUDA(x) TORCH_CHECK(x.is_cuda())\nAT_CUDA_CHECK(cudaGetLastError());")


def test_a_binding_of_declarations_is_named_and_one_with_a_body_is_not():
    assert lean_headers.declarations_only("torch::Tensor softmax_cuda(torch::Tensor x);  // {not code}")
    assert lean_headers.declarations_only(["#include <vector>", "std::vector<at::Tensor> f(const at::Tensor& x, int64_t n);"])
    assert not lean_headers.declarations_only("torch::Tensor f(torch::Tensor x) { return x; }")  # a CPU kernel's body
    assert not lean_headers.declarations_only("#define F(x) x\ntorch::Tensor f(torch::Tensor x);")
    assert not lean_headers.declarations_only("torch::Tensor f(torch::nn::Linear l);")


@needs_nvcc
def test_a_binding_of_declarations_builds_lean_and_one_the_lean_set_lacks_builds_as_written(tmp_path):
    declared = {"declared": "torch::Tensor softmax_cuda(torch::Tensor x);", "functions": ["softmax_cuda"]}
    build = tmp_path / "lean" / "build"
    build.mkdir(parents=True)
    assert _load(SET / "softmax_rows.cu", build, declared) == ["lean", "main.cpp lean binding"]
    assert (build / "main.o").exists()
    lacking = {"declared": declared["declared"] + "\nvoid take(torch::OrderedDict<std::string, at::Tensor> d);", "functions": ["softmax_cuda"]}
    build = tmp_path / "full" / "build"
    build.mkdir(parents=True)
    said = _load(SET / "softmax_rows.cu", build, lacking)
    assert said[0] == "lean" and said[1].startswith("main.cpp full: the lean binding failed") and "main.cpp:3" in said[1], said
    assert (build / "main.o").exists()
    built, ninja = build_steps(build)["main.o"], (build / "build.ninja").read_text()
    assert _load(SET / "softmax_rows.cu", build, lacking) == said  # the candidate's child: the same build, no rebuild
    assert build_steps(build)["main.o"] == built and (build / "build.ninja").read_text() == ninja


# -- a C++ main.cpp with code of its own (a CPU kernel, a CUDA launcher) ------------------------------------------

def test_a_main_cpp_with_code_is_built_lean_unless_it_needs_more():
    body = "torch::Tensor f(torch::Tensor x) { return torch::empty_like(x); }"
    assert lean_headers.lean_code(body, ["f"], ["-O3", "-fopenmp"]) == body
    assert lean_headers.lean_code([body, "int g() { return 1; }"], ["f"], None) is not None
    assert lean_headers.lean_code(body, None, []) is None  # no functions: it binds itself, with pybind11
    assert lean_headers.lean_code("#include <torch/torch.h>\n" + body, ["f"], []) is None
    assert lean_headers.lean_code(body, ["f"], ["-I/elsewhere"]) is None
    text = lean_headers.main_header(lean_headers.operators_called(body), parallel=True)
    assert "#include <ATen/ops/empty_like.h>" in text and "#include <ATen/Parallel.h>" in text
    assert "#include <torch/csrc/utils/pybind.h>" in text  # the binding load_inline appends


# Its code indexes with at::indexing::Slice, which torch/extension.h gives and the lean set does not.
SLICING = (ROOT / "solutions" / "scale_bias_hardswish" / "cpu_fused_o3.py").read_text().replace(
    "    x = x.contiguous();", "    x = x.index({at::indexing::Slice(0, x.size(0))}).contiguous();").replace(
    "kforge_cpu_fused_o3", "kforge_lean_slicing")


def test_a_cpp_candidate_builds_lean_and_one_needing_more_builds_as_written_with_the_same_verdict(tmp_path, build_root):
    from evaluator import CandidateJob, EvalSettings, Status, evaluate
    from reference_problems import resolve_problem

    folder = tmp_path / "scale_bias_hardswish"
    folder.mkdir()
    (folder / "slicing.py").write_text(SLICING)
    fused = (ROOT / "solutions" / "scale_bias_hardswish" / "cpu_fused_o3.py").read_text()  # renamed: a build of its own,
    fused = fused.replace("kforge_cpu_fused_o3", "kforge_lean_fused")  # not another test's, cached
    # torch/types.h as well, as some sources include it: the lean build's own, not torch's beside the lean extension.h
    (folder / "fused.py").write_text(fused.replace("#include <torch/extension.h>", "#include <torch/extension.h>\n#include <torch/types.h>"))
    paths = [folder / "fused.py", folder / "slicing.py"]
    settings = EvalSettings(device="cpu", size="small", trials=2, timing=False, jobs=2, build_root=build_root)
    verdicts = evaluate([CandidateJob(path=p, problem=resolve_problem("scale_bias_hardswish")) for p in paths], settings)
    lean, slicing = sorted(verdicts, key=lambda v: Path(v.solution_path).name)  # fused.py, slicing.py
    assert lean.status is Status.CORRECT and lean.evidence.build_headers == ["main.cpp lean"], lean.evidence
    assert slicing.status is Status.CORRECT, slicing.evidence
    (said,) = slicing.evidence.build_headers
    assert said.startswith("main.cpp full: the lean build failed (main.cpp:") and "indexing" in said, said
    again = list(evaluate([CandidateJob(path=p, problem=resolve_problem("scale_bias_hardswish")) for p in paths], settings))
    assert all(v.evidence.cache_hit for v in again), again  # built once: the cache's builds, and how they were made
    assert sorted(v.evidence.build_headers[0][:len("main.cpp full")] for v in again) == ["main.cpp full", "main.cpp lean"]
