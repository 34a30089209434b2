"""Which device a run is on, named the same way by the parent (for cache lookups) and by the child."""

from __future__ import annotations

import functools
import glob
import os
import platform
import sys
from typing import NamedTuple


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            names = [line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")]
    except OSError:
        names = []
    return names[0] if names else platform.machine()


def device_memory(device: str) -> int:
    """Total memory of the evaluation device (GPU 0 of the visible ones, or the host), without a CUDA context."""
    if device == "cuda":
        import torch

        return torch.cuda.get_device_properties(0).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@functools.cache
def device_name(device: str) -> str:
    if device != "cuda":
        return cpu_name()
    import torch  # here, not at the top: the CLI's start-up must not pay for torch

    return torch.cuda.get_device_name()


def visible_gpus() -> list[str]:
    """The CUDA devices this process may use, named as CUDA_VISIBLE_DEVICES names them (ids or UUIDs)."""
    listed = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return listed
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def auto_device() -> str:
    """cuda when torch can use a CUDA device here. Where the kernel shows no NVIDIA device at all (or
    CUDA_VISIBLE_DEVICES hides them all), the answer is cpu without importing torch: seconds a command returning
    stored verdicts need not spend."""
    if "torch" not in sys.modules and (os.environ.get("CUDA_VISIBLE_DEVICES", "x").strip() in ("", "-1")
                                       or sys.platform.startswith("linux") and not glob.glob("/dev/nvidia[0-9]*")):
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class Peak(NamedTuple):
    bytes_per_s: float | None  # DRAM bandwidth; None where no single number holds (CPUs: it depends on the cache level)
    flops_per_s: float  # fp32 without tensor cores: what a report compares kforge's fp32 kernels with
    fastest_flops_per_s: float  # the most any kernel can do whose results may still pass an fp32 check (see below)
    source: str


# Vendor peaks by a name fragment of torch.cuda.get_device_name(); the highest variant of each chip (SXM), so a
# floor derived from them errs on the low side. fastest_flops_per_s is the dense fp16/bf16 tensor-core rate:
# kforge judges results against strict fp32, not how they were computed, and a kernel on tensor cores (TF32 with
# split-precision repairs, or 16-bit inputs where the tolerance allows) may pass; 8-bit formats (3-bit mantissa)
# cannot pass fp32 tolerances, and 2:4 sparsity needs structured zeros that random inputs lack.
PEAKS = {"H200": Peak(4.8e12, 67e12, 989e12, "H200 SXM datasheet: 132 SMs, 4.8 TB/s, 67 TFLOP/s fp32, 989 TFLOP/s "
                                             "dense bf16"),
         "H100": Peak(3.35e12, 67e12, 989e12, "H100 SXM datasheet: 132 SMs, 3.35 TB/s, 67 TFLOP/s fp32, 989 TFLOP/s "
                                              "dense bf16")}


def peak(name: str) -> Peak | None:
    return next((p for fragment, p in PEAKS.items() if fragment in name), None)


_CPU_FLOPS_PER_CYCLE = (("amx_bf16", 1024), ("avx512f", 64), ("fma", 32))  # per core: AMX tile, 2 FMA units x lanes x 2
_CPU_UNKNOWN_FLOPS_PER_CYCLE = 1024  # an ISA not listed: the widest units known
_CPU_MAX_HZ = 6.5e9  # above every shipping CPU's boost clock, where the kernel does not say the maximum


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as fh:
            return next((set(line.split(":", 1)[1].split()) for line in fh if line.startswith("flags")), set())
    except OSError:
        return set()


def _cpu_max_hz() -> float:
    try:
        with open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq") as fh:
            return int(fh.read()) * 1e3
    except (OSError, ValueError):
        return _CPU_MAX_HZ


@functools.cache
def cpu_peak() -> Peak:
    """A bound no program on this machine can beat, not a speed it reaches: every logical CPU (a candidate may
    start its own threads) at the maximum clock, each retiring its widest units' FLOPs every cycle. No
    bandwidth: that depends on which cache level holds the data."""
    flags = _cpu_flags()
    per_cycle = next((n for flag, n in _CPU_FLOPS_PER_CYCLE if flag in flags), _CPU_UNKNOWN_FLOPS_PER_CYCLE)
    cores, hz = os.cpu_count() or 1, _cpu_max_hz()
    flops = cores * hz * per_cycle
    return Peak(None, flops, flops, f"{cores} CPUs x {hz / 1e9:.2g} GHz x {per_cycle} FLOP/cycle (an upper bound)")
