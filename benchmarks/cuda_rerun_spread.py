"""The run-to-run spread of one honest candidate's speedup: `kforge submit FILE --rerun` N times in a row (fresh
processes each time, as a user reruns it), each verdict's speedup and printed 95 % interval, and how many of
the N speedups each interval covers.

Usage: python benchmarks/cuda_rerun_spread.py FILE[:PROBLEM] ... [-n 10] [--device cuda] [--size full] [--db URL]
       python benchmarks/cuda_rerun_spread.py --batch DIR [-n 10] ...   (`kforge evaluate DIR --rerun` N times)
(several files are run in turn within each of the N rounds, so a drift of the machine lands on all of them;
--deadline S starts no round after S seconds).
Prints one line per verdict, then one JSON object per file: the median speedup, the largest deviation from
it, whether every speedup lies within +-5 % of the median, and the fewest reruns any interval covered.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BAND = 0.05  # every speedup within this share of the median


def submit(path: str, problem: str | None, device: str, size: str, db: str) -> dict:
    """One `kforge submit --rerun --json`: its verdict line (the last JSON line it printed)."""
    cmd = [sys.executable, "-m", "kforge", "submit", path, "--device", device, "--size", size, "--rerun", "--json",
           "--db", db] + (["--problem", problem] if problem else [])
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=os.environ)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return {"status": f"no verdict (exit {done.returncode}): {done.stderr.strip()[-300:]}"}
    return json.loads(lines[-1])


def evaluate(directory: str, device: str, size: str, db: str) -> list[dict]:
    """One `kforge evaluate DIR --rerun --json`: a verdict line per candidate."""
    cmd = [sys.executable, "-m", "kforge", "evaluate", directory, "--device", device, "--size", size, "--rerun", "--json",
           "--db", db]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=os.environ)
    lines = [json.loads(ln) for ln in done.stdout.splitlines() if ln.startswith("{")]
    return lines or [{"path": directory, "status": f"no verdict (exit {done.returncode}): {done.stderr.strip()[-300:]}"}]


def interval(db: str, evaluation_id: int | None) -> tuple[list[float] | None, str]:
    """The stored verdict's printed interval and how it was found."""
    if evaluation_id is None or not db.startswith("sqlite:///"):
        return None, ""
    with sqlite3.connect(db.removeprefix("sqlite:///")) as conn:
        row = conn.execute("SELECT evidence FROM evaluations WHERE id = ?", (evaluation_id,)).fetchone()
    timing = (json.loads(row[0]) if row else {}).get("timing") or {}
    return timing.get("speedup_interval"), timing.get("interval", "")


def summary(name: str, runs: list[dict]) -> dict:
    """Spread and coverage of one file's reruns."""
    speedups = [r["speedup"] for r in runs if r.get("speedup")]
    if not speedups:
        return {"file": name, "runs": len(runs), "speedups": []}
    middle = statistics.median(speedups)
    worst = max(abs(s / middle - 1) for s in speedups)
    covers = [sum(lo <= s <= hi for s in speedups) for lo, hi in (r["interval"] for r in runs if r.get("interval"))]
    return {"file": name, "runs": len(runs), "correct": sum(r.get("status") == "correct" for r in runs),
            "speedups": [round(s, 4) for s in speedups], "median": round(middle, 4),
            "max_dev_pct": round(100 * worst, 2), "within_5pct": worst <= BAND,
            "reference_ms": [r.get("reference_ms") for r in runs], "candidate_ms": [r.get("candidate_ms") for r in runs],
            "intervals": [r.get("interval") for r in runs], "covers": covers,
            "fewest_covered": min(covers) if covers else None,
            "every_interval_covers_9_of_10": bool(covers) and min(covers) >= 0.9 * len(speedups)}


def _record(runs: dict[str, list[dict]], line: dict, db: str, k: int, n: int) -> None:
    line["interval"], line["how"] = interval(db, line.get("evaluation_id"))
    runs.setdefault(line.get("path", "?"), []).append(line)
    print(f"run {k + 1}/{n} {Path(line.get('path', '?')).name}: {line.get('status')} {line.get('speedup')} "
          f"{line.get('interval')} ref {line.get('reference_ms')} cand {line.get('candidate_ms')}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="*", help="FILE or FILE:PROBLEM (a registered name or a problem's path)")
    parser.add_argument("--batch", help="a folder of candidates, evaluated together N times instead")
    parser.add_argument("-n", type=int, default=10)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--size", default="full")
    parser.add_argument("--deadline", type=float, default=None, help="seconds after which no round starts")
    parser.add_argument("--db", default=f"sqlite:///{tempfile.mkdtemp(prefix='kforge-spread-')}/kforge.db")
    args = parser.parse_args()
    jobs = [(f.split(":", 1) + [None])[:2] for f in args.files]
    runs: dict[str, list[dict]] = {}
    began = time.monotonic()
    for k in range(args.n):
        if args.deadline is not None and time.monotonic() - began > args.deadline:
            print(f"deadline: {k} of {args.n} rounds run", flush=True)
            break
        if args.batch:
            for line in evaluate(args.batch, args.device, args.size, args.db):
                _record(runs, line, args.db, k, args.n)
        for path, problem in jobs:
            line = submit(path, problem, args.device, args.size, args.db)
            line.setdefault("path", path)
            _record(runs, line, args.db, k, args.n)
    for path, found in runs.items():
        print(json.dumps(summary(path, found)), flush=True)


if __name__ == "__main__":
    main()
