"""The nvcc driver (evaluator/build/nvcc_driver.py) against nvcc itself, on real sources: the same object, the same
errors and exit status, and nvcc's own run for a command shape the driver does not know."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evaluator.build import nvcc_driver
from tests.test_lean_headers import needs_nvcc

DRIVER = Path(nvcc_driver.__file__)
KERNEL = r"""
#include <cstdio>
namespace { __device__ float scale = 2.0f; }
__global__ void twice(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = scale * x[i];
}
void launch(const float* x, float* y, int n) { twice<<<(n + 255) / 256, 256>>>(x, y, n); std::printf("%d\n", n); }
"""
FLAGS = ["-gencode=arch=compute_90,code=sm_90", "--compiler-options", "-fPIC", "-O3", "-std=c++17"]


def _nvcc() -> str:
    return shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"


def _build(tmp_path: Path, source: str, driven: bool, *extra: str) -> subprocess.CompletedProcess:
    """nvcc or the driver on tmp_path/k.cu (one path: nvcc derives the module id, and so internal symbols, from it)."""
    (tmp_path / "k.cu").write_text(source)
    prefix = [sys.executable, "-I", str(DRIVER)] if driven else []
    out = tmp_path / ("driven.o" if driven else "plain.o")
    return subprocess.run([*prefix, _nvcc(), *FLAGS, *extra, "-c", "k.cu", "-o", str(out)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)


def _section(obj: Path, name: str) -> bytes:
    out = obj.with_suffix(name)
    subprocess.run(["objcopy", "-O", "binary", f"--only-section={name}", str(obj), str(out)], check=True)
    return out.read_bytes()


def _symbols(obj: Path) -> list[str]:
    """The object's symbols, less the temporary file name nvcc names its static initialiser after."""
    lines = subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout.splitlines()
    return sorted(re.sub(r"_GLOBAL__sub_I_\S*cudafe1\.cpp", "_GLOBAL__sub_I_", line.split()[-1]) for line in lines)


@needs_nvcc
def test_the_driver_builds_the_object_nvcc_builds(tmp_path):
    plain, driven = _build(tmp_path, KERNEL, False), _build(tmp_path, KERNEL, True)
    assert plain.returncode == driven.returncode == 0, (plain.stderr, driven.stderr)
    for section in (".nv_fatbin", ".text"):  # the device image and the host code
        assert _section(tmp_path / "driven.o", section) == _section(tmp_path / "plain.o", section), section
    assert _symbols(tmp_path / "driven.o") == _symbols(tmp_path / "plain.o")


@needs_nvcc
def test_a_compile_error_reads_and_exits_as_nvccs(tmp_path):
    broken = KERNEL.replace("scale * x[i]", "scale * undefined_thing")
    plain, driven = _build(tmp_path, broken, False), _build(tmp_path, broken, True)
    assert driven.returncode == plain.returncode != 0
    assert 'identifier "undefined_thing" is undefined' in driven.stdout + driven.stderr
    assert (driven.stdout + driven.stderr).count("error") == (plain.stdout + plain.stderr).count("error")
    assert not (tmp_path / "driven.o").exists()


@needs_nvcc
def test_a_device_only_error_is_reported_after_the_host_front_end_accepted_the_source(tmp_path):
    too_big = KERNEL.replace("if (i < n) y[i] = scale * x[i];",  # 4 MB of shared memory: ptxas refuses it
                             "__shared__ float big[1 << 20]; big[i & 1048575] = x[i]; __syncthreads(); y[i] = big[(i * 7) & 1048575];")
    plain, driven = _build(tmp_path, too_big, False), _build(tmp_path, too_big, True)
    assert driven.returncode == plain.returncode != 0
    assert "ptxas error" in driven.stdout + driven.stderr and "too much shared data" in driven.stdout + driven.stderr


@needs_nvcc
def test_a_shape_it_does_not_know_is_nvccs_to_run(tmp_path):
    two_archs = ("-gencode=arch=compute_80,code=sm_80",)
    plain, driven = _build(tmp_path, KERNEL, False, *two_archs), _build(tmp_path, KERNEL, True, *two_archs)
    assert driven.returncode == plain.returncode == 0
    assert _section(tmp_path / "driven.o", ".nv_fatbin") == _section(tmp_path / "plain.o", ".nv_fatbin")


def test_the_plan_refuses_a_listing_of_another_shape():
    listing = "#$ PATH=/x\n#$ gcc -E -x c++ a.cu -o a.ii\n#$ cudafe++ --module_id_file_name \"m\" a.ii\n"
    assert nvcc_driver.plan(listing) is None
    assert nvcc_driver.plan("") is None


@pytest.mark.parametrize("value", ["/usr/local/cuda/bin/nvcc", "/usr/local/cuda/bin/nvcc --time /tmp/t.csv"])
def test_install_drives_the_nvcc_torch_would_run_and_only_once(monkeypatch, value):
    monkeypatch.setenv("PYTORCH_NVCC", value)
    nvcc_driver.install()
    nvcc_driver.install()  # the compile child's and then the candidate child's: one build.ninja
    command = os.environ["PYTORCH_NVCC"]
    assert command.endswith(" " + value) and command.count(str(DRIVER)) == 1
