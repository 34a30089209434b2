"""Compare kforge's stored median per candidate with Nsight Compute's kernel time for the same forward.

Usage: python benchmarks/ncu_compare.py DB_URL CANDIDATE.py [CANDIDATE.py ...]  (problem = the file's folder)
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

from db import Database
from evaluator.build import precompiled
from evaluator.parent.batch import DEFAULT_BUILD_ROOT, build_key
from kforge.settings import Settings

CALLS = 3
_UNIT_MS = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0, "s": 1e3, "second": 1e3}


def kforge_build_dir(candidate: Path) -> Path:
    """Where kforge's evaluation left this candidate's CUDA build (so a profiler run need not compile again)."""
    return (Settings().build_root or DEFAULT_BUILD_ROOT) / build_key(candidate.read_text(), "cuda")


def reuse_kforge_build() -> None:
    """In the profiled process: load_inline as kforge's children call it (with the precompiled-header flag),
    so ninja finds the same command lines in TORCH_EXTENSIONS_DIR and rebuilds nothing."""
    precompiled.Headers(Path(os.environ["TORCH_EXTENSIONS_DIR"]).parent).install()


def ncu_ms_per_call(candidate: Path) -> float:
    cmd = ["ncu", "--target-processes", "application-only", "--nvtx", "--nvtx-include", "kforge_forward/",
           "--metrics", "gpu__time_duration.sum", "--csv", "--clock-control", "none", sys.executable, str(Path(__file__).with_name("ncu_forward.py")),
           str(candidate), candidate.parent.name, str(CALLS)]
    env = os.environ | {"TORCH_EXTENSIONS_DIR": str(kforge_build_dir(candidate))}  # reuse kforge's build: no recompile
    text = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
    rows = list(csv.DictReader(io.StringIO(text[text.index('"ID"'):])))
    total = sum(float(r["Metric Value"].replace(",", "")) * _UNIT_MS[r["Metric Unit"]] for r in rows)
    return total / CALLS


def main() -> None:
    database = Database(sys.argv[1])
    for path in map(Path, sys.argv[2:]):
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        rows = [r for r in database.evaluations() if r.solution_sha256 == sha and r.candidate_ms and r.size == "full"]
        kforge_ms = sorted(r.candidate_ms for r in rows)[len(rows) // 2] if rows else None
        ncu_ms = ncu_ms_per_call(path)
        diff = (kforge_ms - ncu_ms) / ncu_ms if kforge_ms else None
        print(json.dumps({"candidate": path.name, "kforge_median_ms": kforge_ms, "ncu_kernel_ms": ncu_ms,
                          "relative_difference": diff, "kforge_runs": len(rows)}))


if __name__ == "__main__":
    main()
