"""Audit KernelBench's problems at their own sizes: which accept a trivial answer, which are too fast to time
honestly, which do not fit the device.

Usage: python benchmarks/problem_audit.py KERNELBENCH_DIR [--levels 1,2,3] [--device cuda] [--parallel 2]
       [--out FILE.md]

Each problem's reference runs once in kforge's jail, as in a batch (trials, timing), then its comparer judges the
trivial answers of evaluator.child.audit_rules (zeros, best constant, mean, an input echoed, half the work) against the
expected outputs of every seed. A problem whose reference median is below --fast-us is flagged: at that scale
launch overhead and the L2 flush dominate what a kernel could change. A reference that cannot run gives its cause
(out of memory names the GPU memory it asked for); one that failed beside others is audited again alone.
Prints a Markdown table (and writes it, row by row, with --out).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evaluator.contracts import EvalSettings  # noqa: E402
from evaluator.parent.references import ReferenceFailed, ReferenceServer  # noqa: E402
from evaluator.parent.batch import Batch  # noqa: E402
from reference_problems.registry import load_problem_file  # noqa: E402


def audit_one(path: Path, settings: EvalSettings, fast_us: float) -> dict:
    problem = load_problem_file(path)
    batch = Batch(settings)
    server = ReferenceServer(batch, problem, audit=True)
    row = {"level": path.parent.name.removeprefix("level"), "problem": problem.name}
    try:
        ref = server.ready(lambda want=None: batch.gpus[0])
    except ReferenceFailed as exc:
        return row | {"fits": "no", "note": str(exc)[:160]}
    finally:
        server.close()
        shutil.rmtree(batch.root, ignore_errors=True)
    passing = [f["trivial"] for f in ref.audit if f["passes"]]
    median_us = ref.timing.median_ms * 1e3 if ref.timing else None
    return row | {"fits": "yes", "trivial_passes": ", ".join(passing) or "-",
                  "median_us": f"{median_us:.1f}" if median_us is not None else "-",
                  "too_fast": "yes" if median_us is not None and median_us < fast_us else "-"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernelbench", type=Path)
    ap.add_argument("--levels", default="1,2,3")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--parallel", type=int, default=1, help="problems audited at once (their timings overlap)")
    ap.add_argument("--fast-us", type=float, default=20.0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--only", default=None, help="these problems only (file names without .py, comma-separated)")
    args = ap.parse_args()
    files = [p for level in args.levels.split(",") for p in sorted((args.kernelbench / f"level{level}").glob("*.py"),
                                                                   key=lambda p: int(p.name.split("_")[0]))]
    if args.only:
        files = [p for p in files if p.stem in args.only.split(",")]
    settings = EvalSettings(device=args.device, size="full", trials=2, rep_ms=200, warmup_ms=20)
    began = time.monotonic()
    rows = audit_all(files, settings, args.fast_us, args.parallel, lambda rows: _write(rows, args.out))
    text = _table(rows)
    print(text)
    print(f"{len(rows)} problems audited in {time.monotonic() - began:.0f} s", file=sys.stderr)
    if args.out:
        args.out.write_text(text)


def audit_all(files: list[Path], settings: EvalSettings, fast_us: float, parallel: int,
              progress: Callable[[list[dict]], None]) -> list[dict]:
    """Every problem's row, `parallel` at a time; a problem that failed beside others (most often out of memory
    with a neighbour, but any failure) is audited again alone, so "does not fit" means the device, not the
    company."""
    rows: list[dict] = []
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        for row in pool.map(lambda p: audit_one(p, settings, fast_us), files):
            rows.append(row)
            print(_line(row), file=sys.stderr, flush=True)
            progress(rows)
    for k, path in enumerate(files):
        if parallel > 1 and rows[k]["fits"] == "no":
            rows[k] = audit_one(path, settings, fast_us)
            print(_line(rows[k]), "(again, alone)", file=sys.stderr, flush=True)
            progress(rows)
    return rows


def _line(row: dict) -> str:
    cells = [row["level"], row["problem"], row["fits"], row.get("trivial_passes", row.get("note", "")),
             row.get("median_us", "-"), row.get("too_fast", "-")]
    return "| " + " | ".join(cells) + " |"


def _table(rows: list[dict]) -> str:
    head = ["| level | problem | fits | trivial answers that pass | reference median (us) | too fast to time |",
            "|---|---|---|---|---|---|"]
    return "\n".join(head + [_line(row) for row in rows]) + "\n"


def _write(rows: list[dict], out: Path | None) -> None:
    """The table so far: a run cut off still leaves what it audited."""
    if out:
        out.write_text(_table(rows))

if __name__ == "__main__":
    main()
