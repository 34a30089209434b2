"""Many submitters at once, measured: N honest candidates each submitted alone (`kforge submit`, one
after another), then all at once (N processes, one db), on one device. Prints one JSON line per verdict and a
table: per candidate, its status and speedup alone and in the crowd, and how far apart they are.

    python benchmarks/concurrent_submit.py DB_URL CANDIDATE.py [CANDIDATE.py ...] [--device cuda]
    (a candidate's problem is its folder's name; a file named twice is submitted once alone, twice at once)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def _submit(path: str, db: str, device: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "kforge", "submit", path, "--device", device, "--size", "full" if device == "cuda" else "small",
           "--rerun", "--json", "--db", db]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _verdict(proc: subprocess.Popen, label: str) -> dict:
    out, err = proc.communicate()
    try:
        line = json.loads(out.strip().splitlines()[-1])
    except (IndexError, ValueError):
        line = {"status": f"no verdict (exit {proc.returncode}): {err.strip()[-300:]}", "speedup": None}
    print(json.dumps({"when": label, **line}), flush=True)
    return line


def main(db: str, paths: list[str], device: str) -> None:
    started = time.perf_counter()
    solo = {p: _verdict(_submit(p, db, device), "alone") for p in dict.fromkeys(paths)}  # each file once
    alone = [solo[p] for p in paths]
    alone_s, started = time.perf_counter() - started, time.perf_counter()
    procs = [_submit(p, db, device) for p in paths]
    crowd = [_verdict(proc, "crowd") for proc in procs]
    crowd_s = time.perf_counter() - started
    print(f"\n{len(solo)} files alone, one after another: {alone_s:.1f} s; {len(paths)} submitters at once: {crowd_s:.1f} s\n")
    print("| candidate | alone | crowd | crowd / alone |\n|---|---|---|---|")
    for path, a, c in zip(paths, alone, crowd):
        ratio = f"{c['speedup'] / a['speedup']:.3f}" if a.get("speedup") and c.get("speedup") else "-"
        print(f"| {path} | {a['status']} {a.get('speedup') or 0:.3f}x | {c['status']} {c.get('speedup') or 0:.3f}x | {ratio} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db")
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    main(args.db, args.paths, args.device)
