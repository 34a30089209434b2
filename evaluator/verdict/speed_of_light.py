"""The physical floor of a call's time: what the device needs, at its peaks, to do the reference's FLOPs and to
move the bytes of its inputs and outputs once. A median well below it is not fast, it is impossible: the work
was skipped, cached or finished outside the timer. The FLOPs are counted once per batch on the meta device
(evaluator.parent.flops), the bytes come from the reference's trials or the problem's declaration, the peaks from
evaluator.hardware; the parent decides (verdict/speed.py) with `impossible`.
"""

from __future__ import annotations

from dataclasses import dataclass

from evaluator.hardware import Peak

# A median below half the floor is a cheat. The peaks are datasheet maxima at boost clock, which no kernel
# sustains, so an honest kernel stays above the floor itself; the factor 2 absorbs what the arithmetic leaves
# out: the L2 flush is 256 MB but a small problem's bytes may still be served from a cache the flush missed
# (or compressed by the memory system), and the CUDA event timer's resolution (~0.5 us) is near the floor of
# the smallest problems.
FACTOR = 0.5


@dataclass(frozen=True)
class Floor:
    ms: float
    bound: str  # which limit sets it: "bandwidth" or "flop"
    arithmetic: str  # both bounds, worked out
    hardware: str  # the peaks it was worked out from
    flops: int | None = None  # of one call, as counted: the figures it was worked out from
    bytes_moved: int | None = None

    @property
    def worked(self) -> str:
        return f"{self.arithmetic} ({self.hardware})"

    @property
    def exploit(self) -> str:
        return f"{self.bound}_floor"


def floor(flops: int | None, nbytes: int | None, peak: Peak) -> Floor | None:
    """The larger of the two bounds the device's peaks put on one call; None when neither is known."""
    bounds = {}
    if flops and peak.fastest_flops_per_s:
        bounds["flop"] = (flops / peak.fastest_flops_per_s * 1e3, f"{flops:.3g} FLOP at {peak.fastest_flops_per_s:.3g} FLOP/s")
    if nbytes and peak.bytes_per_s:
        bounds["bandwidth"] = (nbytes / peak.bytes_per_s * 1e3, f"{nbytes:.3g} bytes at {peak.bytes_per_s:.3g} B/s")
    if not bounds:
        return None
    bound = max(bounds, key=lambda k: bounds[k][0])
    worked = "; ".join(f"{how} need {ms:.4g} ms" for ms, how in bounds.values())
    return Floor(bounds[bound][0], bound, worked, peak.source, flops or None, nbytes or None)


def impossible(median_ms: float, found: Floor | None) -> str:
    """Why a median is below what the hardware can do ('' if it is not)."""
    if found is None or median_ms >= FACTOR * found.ms:
        return ""
    return (f"median {median_ms:.4g} ms is below {FACTOR:g} x the {found.bound} floor of {found.ms:.4g} ms: "
            f"{found.worked}")
