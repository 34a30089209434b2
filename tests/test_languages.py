"""A candidate's kernel language, read from its source without running it (evaluator/languages.py)."""

from __future__ import annotations

import pytest

from conftest import CANDIDATES, SOLUTIONS
from evaluator.languages import Language, found, language_of

TRITON = CANDIDATES / "triton"

CUTE = '''
import torch
import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import from_dlpack


@cute.kernel
def add_kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    gC[tidx] = gA[tidx] + gB[tidx]


@cute.jit
def add(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor):
    add_kernel(mA, mB, mC).launch(grid=(1, 1, 1), block=(mA.shape[0], 1, 1))


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        c = torch.empty_like(a)
        add(from_dlpack(a), from_dlpack(b), from_dlpack(c))
        return c
'''

TILELANG = '''
import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def matmul(M, N, K, block_M=128, block_N=128, block_K=32, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            C_local = T.alloc_fragment((block_M, block_N), dtype)
            T.clear(C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])
    return main


class ModelNew:
    def forward(self, A, B):
        return matmul(A.shape[0], B.shape[1], A.shape[1])(A, B)
'''


def test_every_triton_candidate_is_triton():
    sources = sorted(TRITON.rglob("*.py"))
    assert len(sources) >= 10
    for path in sources:
        assert found(path.read_text()) == [Language.TRITON], path


@pytest.mark.parametrize("path, language", [
    ("scale_bias_hardswish/cpu_fused_o3.py", Language.CPP),
    ("softmax/cpu_softmax_o3.py", Language.CPP),
    ("conv1d/seed_002_af9917cd8bead545.py", Language.CUDA),
    ("conv1d/repair_002_cpp_sources.py", Language.CUDA),
    ("avg_pool_2d/repair_001_int64_index.py", Language.CUDA),
])
def test_load_inline_candidates_are_cuda_with_cuda_sources_and_cpp_without(path, language):
    assert language_of((SOLUTIONS / path).read_text()) is language


def test_a_cut_off_file_and_an_extension_built_elsewhere_have_no_language():
    """The truncated seed does not parse; the test candidate imports a module that builds its extension."""
    assert language_of((SOLUTIONS / "matmul_maxpool_sum_scale/seed_003_0cc791c157c69bb6.py").read_text()) is None
    assert language_of((CANDIDATES / "varying_relu/honest.py").read_text()) is None


def test_cute_and_tilelang_kernels_are_recognised_through_their_import_aliases():
    assert found(CUTE) == [Language.CUTE]
    assert found(TILELANG) == [Language.TILELANG]
    assert found(CUTE.replace("import cutlass.cute as cute", "from cutlass import cute")) == [Language.CUTE]


def test_a_decorator_counts_only_from_its_own_package():
    """`jit` from numba and `kernel` from another module are not CuTe's or Triton's; importing triton for
    triton.cdiv makes no kernel either."""
    assert found("from numba import jit\n\n@jit\ndef f(x):\n    return x\n") == []
    assert found("import mylib as cute\n\n@cute.kernel\ndef f(x):\n    pass\n") == []
    assert found("import triton\nn = triton.cdiv(10, 4)\n") == []


def test_triton_decorators_under_any_name_and_nested():
    source = '''
from triton import jit as kernel
from triton.runtime import autotune
import triton as tr

def make():
    @autotune(configs=[], key=["n"])
    @kernel
    def inner(x_ptr, n):
        pass
    return inner

@tr.heuristics({"BLOCK": lambda args: 128})
@tr.jit
def outer(x_ptr):
    pass
'''
    assert found(source) == [Language.TRITON]


def test_languages_are_listed_in_the_order_of_their_first_kernel_and_one_cuda_build_makes_cpp_cuda():
    mixed = (TRITON / "relu/honest.py").read_text() + '''
from torch.utils import cpp_extension
helper = cpp_extension.load_inline("helper", cpp_sources="int f();", functions=["f"])
cuda = cpp_extension.load(name="k", sources=["k.cpp", "k.cu"])
'''
    assert found(mixed) == [Language.TRITON, Language.CUDA]
    assert found("import torch\nx = torch.utils.cpp_extension.load_inline('a', 'int f();', None)\n") == [Language.CPP]
    assert found("import torch\nx = torch.utils.cpp_extension.load_inline('a', 'int f();', [])\n") == [Language.CPP]
    assert found("import torch\nx = torch.utils.cpp_extension.load_inline('a', 'int f();', src)\n") == [Language.CUDA]


def test_a_backend_value_overrides_what_the_source_says():
    cpp = (SOLUTIONS / "scale_bias_hardswish/cpu_fused_o3.py").read_text()
    assert language_of(cpp, backend="Triton") is Language.TRITON
    assert language_of(cpp, backend="cute") is Language.CUTE
    with pytest.raises(ValueError, match="unknown backend 'ray'.*cuda, cpp, triton, cute, tilelang"):
        language_of(cpp, backend="ray")
