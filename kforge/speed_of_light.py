"""Speed of light in the report: the bytes and FLOPs of one call against the device's peaks, so a report shows how
far a kernel is from the hardware, not only from PyTorch.

The figures are those the judge worked its floor out from, stored with each verdict (evaluator.contracts.SpeedOfLight:
declared in KFORGE_META, else measured when the problem was judged). A report only reads the db: it runs no problem
code and starts no child, so a problem whose verdicts hold no figures shows none.
"""

from __future__ import annotations

from typing import NamedTuple

from db import EvaluationRow
from db.metrics import fraction_of_peak
from evaluator.contracts import Evidence
from evaluator.hardware import peak


class Cost(NamedTuple):
    bytes_moved: int | None = None
    flops: int | None = None


Costs = dict[tuple[str, str, str], Cost]  # (problem, size, precision) -> its figures


class Achieved(NamedTuple):
    """What one timed run reached; fractions are None where the peak or the cost is unknown."""

    bytes_per_s: float | None
    flops_per_s: float | None
    bandwidth_fraction: float | None
    flops_fraction: float | None


def achieved(cost: Cost, seconds: float, device_name: str) -> Achieved:
    bw = cost.bytes_moved / seconds if cost.bytes_moved else None
    fl = cost.flops / seconds if cost.flops else None
    device_peak = peak(device_name)
    if device_peak is None:
        return Achieved(bw, fl, None, None)
    return Achieved(bw, fl, fraction_of_peak(bw, device_peak.bytes_per_s), fraction_of_peak(fl, device_peak.flops_per_s))


def stored_cost(row: EvaluationRow) -> Cost | None:
    """The figures a stored verdict holds, or None (timed without a floor, or stored before verdicts held them)."""
    timing = Evidence.model_validate(row.evidence).timing
    sol = timing.speed_of_light if timing else None
    return Cost(sol.bytes_moved, sol.flops) if sol and (sol.bytes_moved or sol.flops) else None


def costs(runs: list[EvaluationRow]) -> Costs:
    """Per (problem, size, precision): the figures of the newest of `runs` (newest first, as Database.evaluations
    gives them) whose verdict holds them. A call's bytes and FLOPs follow from its shapes and dtypes alone, so they
    stand for every device's runs of that size and precision."""
    found: Costs = {}
    for row in runs:
        if (key := (row.problem, row.size, row.precision)) not in found and (cost := stored_cost(row)) is not None:
            found[key] = cost
    return found
