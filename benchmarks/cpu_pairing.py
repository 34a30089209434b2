"""The paired CPU timing's goal, measured: the same honest C++ kernel over N evaluations (each a fresh batch: new
reference and candidate processes), quiet and with a process spinning on one core, gives speedups with a
coefficient of variation <= 10 %; a candidate doing the reference's own work gives 1.0x within 10 %.

    python benchmarks/cpu_pairing.py [-n N] [--only CANDIDATE] [--apart]
    (one line per evaluation, then a table; CANDIDATE: cpu_fused_o3 or same_as_reference; --apart also times
    every configuration with reference and candidate timed apart, as before pairing)
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evaluator import CandidateJob, EvalSettings, evaluate  # noqa: E402
from reference_problems import resolve_problem  # noqa: E402
SAME = ROOT / "tests/candidates/scale_bias_hardswish/same_as_reference.py"  # the reference's own ops, from C++


def _spin(stop) -> None:
    while not stop.is_set():
        pass


def _once(job: CandidateJob, settings: EvalSettings, hog: bool) -> float:
    """One fresh batch; `hog`: a process spins on core 0 meanwhile."""
    stop = multiprocessing.Event()
    spinner = multiprocessing.Process(target=_spin, args=(stop,), daemon=True) if hog else None
    if spinner:
        spinner.start()
        os.sched_setaffinity(spinner.pid, {0})
    try:
        (verdict,) = evaluate([job], settings)
    finally:
        stop.set()
        if spinner:
            spinner.join()
    low, high = verdict.evidence.timing.speedup_interval
    pairs = ", ".join(f"{s:.3f}" for s in verdict.evidence.timing.pair_speedups or [])
    print(f"{job.path.stem:17} paired={settings.paired!s:5} hog={hog!s:5} {verdict.status.value:8} "
          f"{verdict.speedup:.3f}x (95 %: {low:.3f}-{high:.3f})" + (f" pairs: {pairs}" if pairs else ""), flush=True)
    return verdict.speedup


def main(n: int, only: str | None, apart: bool) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="kforge-pairing-"))
    problem = resolve_problem("scale_bias_hardswish")
    jobs = [CandidateJob(path=ROOT / "solutions/scale_bias_hardswish/cpu_fused_o3.py", problem=problem),
            CandidateJob(path=SAME, problem=problem)]
    rows = {}
    for job in (j for j in jobs if only in (None, j.path.stem)):
        for paired in (True, False) if apart else (True,):
            settings = EvalSettings(device="cpu", size="small", trials=3, build_root=scratch / "builds", paired=paired)
            for hog in (False, True):
                rows[job.path.stem, paired, hog] = [_once(job, settings, hog) for _ in range(n)]
    print(f"\n| candidate | timed | hog on one core | speedups ({n} evaluations) | median | CV |\n|---|---|---|---|---|---|")
    for (name, paired, hog), speedups in rows.items():
        cv = statistics.pstdev(speedups) / statistics.fmean(speedups)
        print(f"| {name} | {'paired' if paired else 'apart'} | {'yes' if hog else 'no'} | "
              f"{', '.join(f'{s:.3f}' for s in speedups)} | {statistics.median(speedups):.3f} | {100 * cv:.1f} % |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5, help="evaluations per configuration")
    parser.add_argument("--only", help="cpu_fused_o3 or same_as_reference")
    parser.add_argument("--apart", action="store_true", help="also time reference and candidate apart")
    args = parser.parse_args()
    main(args.n, args.only, args.apart)
