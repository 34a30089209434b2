"""kforge's precompiled torch/extension.h (evaluator/build/precompiled.py): which builds get it, that a real compile
through the evaluator uses it, and that a .gch built with other flags is ignored without breaking the build."""

from __future__ import annotations

import functools
import inspect
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import torch.utils.cpp_extension as cpp_extension

from conftest import COMPILED_RELU, SOLUTIONS
from evaluator import CandidateJob, EvalSettings, Status, Verdict, evaluate
from evaluator.build import precompiled
from evaluator.parent.batch import build_key
from reference_problems import resolve_problem

# The fused CPU solution as it would be if it included torch/torch.h: its main.cpp then needs torch's full
# headers (evaluator/build/lean_headers.py), so it is built with the precompiled one.
FUSED_FULL = (SOLUTIONS / "scale_bias_hardswish" / "cpu_fused_o3.py").read_text().replace(
    "#include <torch/extension.h>", "#include <torch/torch.h>").replace("kforge_cpu_fused_o3", "kforge_pch_fused")

RELU_O0 = COMPILED_RELU.replace("kforge_survival_relu", "kforge_pch_relu_o0").replace('"-O3"', '"-O0"').replace(
    "#include <torch/extension.h>", "#include <torch/torch.h>")  # full headers: a build the precompiled one is for


# -- without a compiler run -------------------------------------------------------------------------------------

def test_flag_sets_are_read_from_literal_load_inline_calls():
    assert precompiled.predicted_builds(FUSED_FULL) == [(("-O3", "-fopenmp"), False, False)]  # a body needing torch's all
    lean = (SOLUTIONS / "scale_bias_hardswish" / "cpu_fused_o3.py").read_text()
    assert precompiled.predicted_builds(lean) == []  # a body built against a lean header of its own: nothing to precompile
    aliased = ("from torch.utils.cpp_extension import load_inline as li\nFLAGS = ['-O2']\n"
               "m = li('a', cpp_sources='', cuda_sources='__global__ void k(){}', extra_cflags=FLAGS)\n")
    assert precompiled.predicted_builds(aliased) == [(("-O2",), True, False)]  # no functions: nothing to bind
    declared = aliased.replace("cpp_sources=''", "cpp_sources='void k2();', functions=['k2']")
    assert precompiled.predicted_builds(declared) == [(("-O2",), True, True)]
    computed = "from torch.utils.cpp_extension import load_inline\nm = load_inline('a', '', extra_cflags=flags())\n"
    assert precompiled.predicted_builds(computed) == []
    with_includes = "import torch.utils.cpp_extension as c\nm = c.load_inline('a', '', extra_include_paths=['inc'])\n"
    assert precompiled.predicted_builds(with_includes) == []


def test_each_flag_set_has_its_own_key_and_unsafe_flags_get_none(tmp_path):
    o3 = precompiled.variant(tmp_path, ["-O3"], False)
    assert o3 == precompiled.variant(tmp_path, ("-O3",), False)
    assert precompiled.variant(tmp_path, [""], False).key == precompiled.variant(tmp_path, None, False).key
    assert len({o3.key, precompiled.variant(tmp_path, ["-O2"], False).key, precompiled.variant(tmp_path, None, False).key}) == 3
    assert "-O3" in o3.flags and "-fPIC" in o3.flags and not any("TORCH_EXTENSION_NAME" in f for f in o3.flags)
    assert o3.directory.parent == tmp_path / "pch"
    for unsafe in (["-I/somewhere"], ["-include", "x.h"], ["-O3; touch x"], "-O3", ["-fplugin=x.so"]):
        assert precompiled.variant(tmp_path, unsafe, False) is None, unsafe


def test_the_wrapper_adds_the_include_directory_only_to_eligible_builds(tmp_path, monkeypatch):
    calls = []
    for name in ("load_inline", "load"):
        real = getattr(cpp_extension, name)
        record = functools.partial(lambda real, *a, **k: calls.append(inspect.signature(real).bind(*a, **k).arguments), real)
        monkeypatch.setattr(cpp_extension, name, functools.wraps(real)(record))
    precompiled.Headers(tmp_path).install()
    v = precompiled.variant(tmp_path, ["-O3"], False)

    cpp_extension.load_inline("m", "int f();", extra_cflags=["-O3"])
    cpp_extension.load_inline("m", "int f();", None, None, None, ["-O3"])  # extra_cflags given by position
    cpp_extension.load("m", ["a.cpp"], extra_cflags=["-O3"])
    assert [args["extra_cflags"] for args in calls] == [["-O3", f"-I{v.directory}"]] * 3
    assert not v.directory.exists()  # the wrapper writes nothing: pch/ is read-only in children, the parent builds

    calls.clear()
    cpp_extension.load_inline("m", "int f();", extra_cflags=["-O3"], extra_include_paths=["inc"])
    cpp_extension.load_inline("m", "int f();", extra_cflags=["-I/elsewhere"])
    cpp_extension.load_inline("m", "int f();", extra_cflags="-O3")  # not a list: torch's problem, untouched
    assert [args["extra_cflags"] for args in calls] == [["-O3"], ["-I/elsewhere"], "-O3"]


# -- real compiles through the evaluator ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("pch_builds")


def _settings(root: Path) -> EvalSettings:
    return EvalSettings(device="cpu", size="small", trials=3, warmup_ms=5, rep_ms=20, leak_calls=2, jobs=1, build_root=root)


def _build_dir(root: Path, candidate: Path, name: str) -> Path:
    return root / build_key(candidate.read_text(), "cpu") / name


def _cflags(build_dir: Path) -> list[str]:
    (line,) = [ln for ln in (build_dir / "build.ninja").read_text().splitlines() if ln.startswith("cflags = ")]
    return shlex.split(line.removeprefix("cflags = "))


def _gcc_verdict_on_pch(build_dir: Path, v: precompiled.Variant) -> str:
    """What gcc -H says of the .gch when given the build's exact compile flags: '!' used, 'x' rejected."""
    cmd = [*v.cxx, *_cflags(build_dir), "-H", "-E", "-fpch-preprocess", str(build_dir / "main.cpp"), "-o", os.devnull]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stderr
    marks = re.findall(rf"^([!x]) {re.escape(str(v.gch))}$", out, re.MULTILINE)
    return marks[0] if marks else ""


def _dependencies(build_dir: Path) -> str:
    """The headers the real compile of main.o read, as ninja recorded them from gcc's depfile."""
    return subprocess.run(["ninja", "-C", str(build_dir), "-t", "deps", "main.o"], capture_output=True, text=True).stdout


def _main_o_builds(build_dir: Path) -> int:
    return sum(line.split("\t")[3] == "main.o" for line in (build_dir / ".ninja_log").read_text().splitlines()[1:])


@pytest.fixture(scope="module")
def fused(root, tmp_path_factory) -> tuple[Verdict, Path]:
    """The fused CPU solution (full headers) evaluated once in the module's build root: the parent builds its
    -O3 -fopenmp precompiled header before the compile, so the .gch is there for whichever test asks first."""
    path = tmp_path_factory.mktemp("fused") / "scale_bias_hardswish" / "fused_full.py"
    path.parent.mkdir()
    path.write_text(FUSED_FULL)
    (verdict,) = evaluate([CandidateJob(path=path, problem=resolve_problem("scale_bias_hardswish"))], _settings(root))
    return verdict, path


@pytest.mark.slow
def test_real_compile_uses_the_precompiled_header_built_with_its_exact_flags(root, fused):
    verdict, path = fused
    assert verdict.status is Status.CORRECT, verdict.evidence

    v = precompiled.variant(root, ["-O3", "-fopenmp"], False)
    build_dir = _build_dir(root, path, "kforge_pch_fused_scale_bias_hardswish")
    assert v.gch.is_file() and v.gch.stat().st_size > 10**8
    cflags = _cflags(build_dir)
    assert cflags[-1] == v.include_flag
    # the .gch was built with the very flags of the candidate's compile, less the extension's name
    built_with = shlex.split((v.directory / "build.log").read_text().splitlines()[0])
    assert built_with[:len(v.cxx)] == list(v.cxx)
    assert built_with[len(v.cxx):built_with.index("-Wno-error")] == [f for f in cflags[:-1] if not f.startswith("-DTORCH_EXTENSION_NAME=")]
    # gcc accepts it for this compile, and the real compile read it rather than the header behind it
    assert _gcc_verdict_on_pch(build_dir, v) == "!"
    deps = _dependencies(build_dir)
    assert "main.cpp" in deps and str(v.header) not in deps
    assert _main_o_builds(build_dir) == 1  # the candidate child wrote the same build.ninja: no rebuild there


@pytest.mark.slow
def test_a_precompiled_header_with_other_flags_is_ignored_and_the_build_is_still_right(root, fused, tmp_path):
    built = precompiled.variant(root, ["-O3", "-fopenmp"], False)
    assert fused[0].status is Status.CORRECT and built.gch.is_file(), fused[0].evidence  # the real .gch linked in below
    candidate = tmp_path / "relu_o0.py"
    candidate.write_text(RELU_O0)
    v = precompiled.variant(root, ["-O0"], False)
    assert precompiled.ensure_directory(v)
    try:
        os.link(built.gch, v.gch)  # a real .gch, but built with -O3 -fopenmp: gcc must reject it for -O0
    except OSError:
        shutil.copyfile(built.gch, v.gch)

    (verdict,) = evaluate([CandidateJob(path=candidate, problem=resolve_problem("relu"))], _settings(root))
    assert verdict.status is Status.CORRECT, verdict.evidence

    build_dir = _build_dir(root, candidate, "kforge_pch_relu_o0")
    assert _cflags(build_dir)[-1] == v.include_flag
    assert _gcc_verdict_on_pch(build_dir, v) == "x"
    assert str(v.header) in _dependencies(build_dir)  # gcc fell back to torch's header through the link
    assert v.gch.samefile(built.gch) or v.gch.stat().st_size == built.gch.stat().st_size  # nobody replaced it


def test_the_compiler_of_a_precompiled_header_reaches_a_build_root_in_a_private_folder(tmp_path):
    """A build root under a folder only its owner may enter (root's HOME, a mkdtemp): the jailed compiler runs as
    a uid that can read it, or the .gch fails with "Permission denied" and every main.cpp compiles without it."""
    from evaluator.parent.batch import Batch

    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    batch = Batch(EvalSettings(device="cpu", build_root=private / "builds", sandbox="warn"))
    try:
        tool = batch.tool(batch.root / "pch-scratch")
        (private / "builds" / "pch" / "probe.h").write_text("int x;\n")
        log = batch.root / "tool.log"
        assert tool(["cat", str(private / "builds" / "pch" / "probe.h")], log) == 0, log.read_text()
    finally:
        batch.stop.set()
        shutil.rmtree(batch.root, ignore_errors=True)
