"""Speed of light: the bytes and FLOPs a problem must move and do at full size, and the device peaks they
are judged against, so a report shows how far a kernel is from the hardware, not only from PyTorch.

Problems declare `bytes_moved` / `flops` in KFORGE_META; for the others (e.g. imported KernelBench files)
they are derived by the evaluator (evaluator.parent.introspect: shapes on torch's meta device, in a jailed child).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import NamedTuple

from db.metrics import fraction_of_peak
from evaluator.contracts import EvaluatorError
from evaluator.hardware import peak
from evaluator.parent.introspect import introspect
from reference_problems import Problem

_log = logging.getLogger(__name__)


class Cost(NamedTuple):
    bytes_moved: int | None = None
    flops: int | None = None


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


def costs(problems: list[Problem], sandbox: str = "strict") -> dict[str, Cost]:
    """Per problem name: declared values, with the missing ones derived (one child for all problems)."""
    todo = [p for p in problems if p.meta.bytes_moved is None or p.meta.flops is None]
    derived = derive([p.path for p in todo], sandbox) if todo else {}
    result = {}
    for p in problems:
        guess = derived.get(str(p.path), Cost())
        result[p.name] = Cost(p.meta.bytes_moved or guess.bytes_moved, p.meta.flops or guess.flops)
    return result


def derive(paths: list[Path], sandbox: str = "strict") -> dict[str, Cost]:
    """Measured by the evaluator's introspect child, in the jail and under its limits (the parent never executes
    problem code). A file that fails, hangs or kills its child, or a sandbox that strict mode refuses, yields no
    entry and a warning rather than an error: the report just omits the numbers."""
    try:
        found = introspect(paths, sandbox=sandbox)
    except EvaluatorError as exc:
        _log.warning("speed of light not derived: %s", exc)
        return {}
    for path, measured in found.items():
        if measured.error:
            _log.warning("speed of light not derived for %s: %s", path, measured.error)
    return {path: Cost(m.bytes_moved, m.flops) for path, m in found.items() if not m.error}
