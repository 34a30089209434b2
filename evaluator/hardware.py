"""Which device a run is on, named the same way by the parent (for cache lookups) and by the child."""

from __future__ import annotations

import functools
import os
import platform
from typing import NamedTuple


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            names = [line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")]
    except OSError:
        names = []
    return names[0] if names else platform.machine()


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
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class Peak(NamedTuple):
    bytes_per_s: float  # DRAM bandwidth
    flops_per_s: float  # fp32 without tensor cores: kforge judges fp32 kernels


# Vendor peaks by a name fragment of torch.cuda.get_device_name(); the highest variant of each chip, so a
# floor derived from them errs on the low side. CPUs: no entry (no single meaningful number).
PEAKS = {"H200": Peak(bytes_per_s=4.8e12, flops_per_s=67e12), "H100": Peak(bytes_per_s=3.35e12, flops_per_s=67e12)}


def peak(name: str) -> Peak | None:
    return next((p for fragment, p in PEAKS.items() if fragment in name), None)
