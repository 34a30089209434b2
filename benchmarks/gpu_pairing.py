"""Paired timing on a GPU: the repairs at full size, timed paired (the reference beside every round of the candidate)
and apart (one after the other, as before pairing), alternating batches, N of each. Prints one line per verdict
and a table: per candidate, the median speedup and candidate time of each way, and their difference.

    python benchmarks/gpu_pairing.py DIR [-n N] [--build-root DIR]   (DIR: a solutions-style tree)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from evaluator import CandidateJob, EvalSettings, evaluate  # noqa: E402
from reference_problems import list_problems  # noqa: E402


def main(directory: Path, n: int, build_root: Path) -> None:
    known = {p.name: p for p in list_problems()}
    jobs = [CandidateJob(path=p, problem=known[p.parent.name]) for p in sorted(directory.rglob("repair_*.py"))]
    rows: dict[tuple[str, bool], list[tuple[float, float]]] = {}
    for round_ in range(n):
        for paired in (True, False) if round_ % 2 == 0 else (False, True):
            settings = EvalSettings(device="cuda", size="full", build_root=build_root, paired=paired)
            for v in evaluate(jobs, settings):
                name = Path(v.solution_path).stem
                low, high = (v.evidence.timing.speedup_interval if v.evidence.timing else None) or (None, None)
                print(f"{name:28} paired={paired!s:5} {v.status.value:8} {v.speedup or 0:.3f}x ({low}-{high}) "
                      f"cand {v.candidate.median_ms if v.candidate else None} ms {v.evidence.cause or ''}", flush=True)
                if v.speedup:
                    rows.setdefault((name, paired), []).append((v.speedup, v.candidate.median_ms))
    print("\n| candidate | paired speedup | apart speedup | diff | paired ms | apart ms |\n|---|---|---|---|---|---|")
    for name in sorted({k[0] for k in rows}):
        p, a = rows.get((name, True), []), rows.get((name, False), [])
        if p and a:
            ps, as_ = statistics.median(s for s, _ in p), statistics.median(s for s, _ in a)
            print(f"| {name} | {ps:.3f} | {as_:.3f} | {100 * (ps / as_ - 1):+.1f} % | "
                  f"{statistics.median(m for _, m in p):.3f} | {statistics.median(m for _, m in a):.3f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("-n", type=int, default=2, help="batches of each way")
    parser.add_argument("--build-root", type=Path, default=Path(tempfile.mkdtemp(prefix="kforge-pairing-builds-")))
    args = parser.parse_args()
    main(args.directory, args.n, args.build_root)
