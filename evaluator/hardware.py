"""Which device a run is on, named the same way by the parent (for cache lookups) and by the child."""

from __future__ import annotations

import functools
import platform

import torch


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            names = [line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")]
    except OSError:
        names = []
    return names[0] if names else platform.machine()


@functools.cache
def device_name(device: str) -> str:
    return torch.cuda.get_device_name() if device == "cuda" else cpu_name()


def auto_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


# Peak DRAM bandwidth (B/s) by a name fragment of torch.cuda.get_device_name(); the highest variant of each
# chip, so the floor derived from it errs on the low side. CPUs: no entry (no single meaningful number).
PEAK_BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12}


def peak_bandwidth(name: str) -> float | None:
    return next((bw for fragment, bw in PEAK_BANDWIDTH.items() if fragment in name), None)
