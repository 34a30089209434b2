"""Peak memory of the evaluator on a giant problem: the parent (which compares outputs chunk-wise) and each child.

Usage: python benchmarks/giant_memory.py CANDIDATE.py [...]  (problem = the file's folder; full size, CUDA)
Prints one JSON object: per candidate the status and the children's peaks (GPU and host, from their own reports),
then the parent's and the largest child's peak host RSS for the whole run (getrusage).
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

from evaluator import CandidateJob, EvalSettings, evaluate
from reference_problems import resolve_problem


def main() -> None:
    jobs = [CandidateJob(path=p, problem=resolve_problem(p.parent.name)) for p in map(Path, sys.argv[1:])]
    verdicts = {Path(v.solution_path).name: {"status": v.status.value, "cause": v.evidence.cause[:160],
                                             "child_peaks": v.evidence.peak_memory}
                for v in evaluate(jobs, EvalSettings(device="cuda", size="full", jobs=len(jobs)))}
    gib = 2**20  # ru_maxrss is in KiB on Linux
    print(json.dumps({"candidates": verdicts,
                      "parent_peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / gib,
                      "largest_child_peak_rss_gib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / gib},
                     indent=1))


if __name__ == "__main__":
    main()
