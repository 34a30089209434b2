"""The Triton watch (evaluator/child/triton_watch.py) on real Triton kernels, each candidate in a fresh interpreter as
in a child: TRITON_INTERPRET=1 is in its environment before triton is imported (on CPU), and the watch is
installed before the candidate is imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import CANDIDATES, ROOT

pytest.importorskip("triton")

TRITON = CANDIDATES / "triton"

# The child's order: watch installed, problem and candidate imported, models built, then watched calls.
_HARNESS = r"""
import json, sys
from pathlib import Path
import torch
from evaluator.child import loading, trials
from evaluator.child.triton_watch import TritonWatch
from reference_problems.registry import resolve_problem

candidate, name, device = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
watch = TritonWatch(candidate)
watch.install()
registered = resolve_problem(name)
problem = loading.load_problem(registered.path, registered.overrides("small"))
module = loading.import_file(candidate, "kforge_candidate")
out = {"defined": list(watch.report.modules), "calls": [], "correct": []}
reference = trials.build_model(problem.Model, problem, 0, device)
model = trials.build_model(module.ModelNew, problem, 0, device)
for seed in (1, 2):
    inputs = trials.make_inputs(problem, seed, device)
    with torch.no_grad():
        try:
            got, calls = watch.call(lambda: model(*inputs))
        except Exception as exc:
            out["error"] = f"{type(exc).__name__}: {exc}"
            break
        want = reference(*inputs)
    out["calls"].append(calls.model_dump())
    meta = problem.KFORGE_META
    out["correct"].append(torch.allclose(got, want, atol=meta["atol"], rtol=meta["rtol"]))
out["foreign"] = watch.foreign
print(json.dumps(out))
"""


def watched(candidate: Path, problem: str, tmp_path: Path, device: str = "cpu", interpret: bool = True) -> dict:
    """Run the harness on one candidate in a fresh interpreter; its Triton home is tmp_path/home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITON_")}
    path = [str(ROOT), str(candidate.parent), os.environ.get("PYTHONPATH", "")]
    env |= {"PYTHONPATH": os.pathsep.join(filter(None, path)), "TRITON_HOME": str(tmp_path / "home")}
    env |= {"TRITON_INTERPRET": "1"} if interpret else {}
    proc = subprocess.run([sys.executable, "-c", _HARNESS, str(candidate), problem, device], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


_LIBRARY = '''
import triton
import triton.language as tl


@triton.jit
def relu_elsewhere(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)
'''


def test_an_honest_candidate_launches_its_own_kernel_once_per_call_and_writes_no_cache(tmp_path):
    seen = watched(TRITON / "relu" / "honest.py", "relu", tmp_path)
    assert seen["defined"] == ["relu_kernel"]
    assert seen["calls"] == [{"kernel": 1, "reference": 0, "foreign": 0}] * 2
    assert seen["correct"] == [True, True] and seen["foreign"] == []
    assert not (tmp_path / "home").exists()  # the interpreter compiles nothing, so Triton makes no cache


def test_each_launch_counts(tmp_path):
    """The MLP launches its one kernel once per layer."""
    seen = watched(TRITON / "mlp" / "honest.py", "mlp", tmp_path)
    assert seen["defined"] == ["linear_kernel"]
    assert [c["kernel"] for c in seen["calls"]] == [3, 3] and seen["correct"] == [True, True]


def test_a_kernel_defined_but_never_launched_is_recorded_with_no_launch(tmp_path):
    seen = watched(TRITON / "relu" / "unlaunched.py", "relu", tmp_path)
    assert seen["defined"] == ["relu_kernel"]
    assert seen["calls"] == [{"kernel": 0, "reference": 0, "foreign": 0}] * 2
    assert seen["correct"] == [True, True]  # right outputs, from torch.relu


def test_a_kernel_from_another_module_is_foreign(tmp_path):
    """Imported from a library file: launched, named, never the candidate's own."""
    _file(tmp_path, "kernels_elsewhere.py", _LIBRARY)
    candidate = _file(tmp_path, "borrowed.py", '''
import torch
import triton
from kernels_elsewhere import relu_elsewhere


class ModelNew(torch.nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        relu_elsewhere[(triton.cdiv(x.numel(), 4096),)](x, y, x.numel(), BLOCK=4096)
        return y
''')
    seen = watched(candidate, "relu", tmp_path)
    assert seen["defined"] == []
    assert seen["calls"] == [{"kernel": 0, "reference": 0, "foreign": 1}] * 2
    assert seen["foreign"] == ["kernels_elsewhere.relu_elsewhere"] and seen["correct"] == [True, True]


def test_autotuned_heuristic_and_nested_kernels_are_its_own_and_warmups_and_launches_outside_a_call_do_not_count(
        tmp_path):
    candidate = _file(tmp_path, "tuned.py", '''
import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 2048})], key=["n"])
@triton.jit
def tuned(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


def make():
    @triton.heuristics({"BLOCK": lambda args: 4096})
    @triton.jit
    def copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
    return copy


copy = make()
warm = torch.ones(8)
tuned[(1,)](warm, warm, 8)  # at import: before any watched call
copy.warmup(warm, warm, 8, grid=(1,))


class ModelNew(torch.nn.Module):
    def forward(self, x):
        y, z = torch.empty_like(x), torch.empty_like(x)
        n = x.numel()
        tuned[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
        copy[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](y, z, n)
        return z
''')
    seen = watched(candidate, "relu", tmp_path)
    assert seen["defined"] == ["tuned", "make.<locals>.copy"]
    assert seen["calls"] == [{"kernel": 2, "reference": 0, "foreign": 0}] * 2 and seen["correct"] == [True, True]


def test_without_the_interpreter_a_cpu_launch_fails_but_the_kernel_is_still_recorded(tmp_path):
    """TRITON_INTERPRET is read when @triton.jit runs: unset, the kernel is a compiled JITFunction, which needs a
    GPU driver to launch, and GPU tensors where there is one."""
    seen = watched(TRITON / "relu" / "honest.py", "relu", tmp_path, interpret=False)
    assert seen["defined"] == ["relu_kernel"] and seen["calls"] == []
    assert "0 active drivers" in seen["error"] or "cannot be accessed from Triton (cpu tensor?)" in seen["error"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_compiled_launches_are_counted_with_their_source(tmp_path):
    """Compiled by Triton (a cache under its home), launched through JITFunction.run and by hand from a
    CompiledKernel; the library's kernel is foreign."""
    _file(tmp_path, "kernels_elsewhere.py", _LIBRARY)
    candidate = _file(tmp_path, "gpu_relu.py", '''
import torch
import triton
import triton.language as tl
from kernels_elsewhere import relu_elsewhere


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        y, z = torch.empty_like(x), torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 1024),)
        compiled = relu_kernel[grid](x, y, n, BLOCK=1024)
        compiled[(grid[0], 1, 1)](x, y, n, 1024)  # by hand: a 3-d grid and every argument, the constexpr too
        relu_elsewhere[grid](y, z, n, BLOCK=1024)
        return z
''')
    seen = watched(candidate, "relu", tmp_path, device="cuda", interpret=False)
    assert "error" not in seen, seen["error"]
    assert seen["defined"] == ["relu_kernel"]
    assert seen["calls"] == [{"kernel": 2, "reference": 0, "foreign": 1}] * 2 and seen["correct"] == [True, True]
    assert seen["foreign"] == ["kernels_elsewhere.relu_elsewhere"]
    assert any((tmp_path / "home" / ".triton" / "cache").rglob("*.cubin"))
