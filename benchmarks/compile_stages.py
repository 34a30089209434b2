"""Where a load_inline CUDA source's compile spends its time, stage by stage, with torch's full headers and lean.

Usage: python benchmarks/compile_stages.py [FILES...] [--variants full,lean] [--parallel N] [--json OUT] [--serial-nvcc]
FILES are .cu sources (benchmarks/compile_set/ by default) or candidate .py files, whose load_inline
cuda_sources are read without running them (module-level string literals). Each source is built the way
kforge's compile child builds it (torch's load_inline, evaluator/build/lean_headers.py installed for `lean`, nvcc
started through evaluator/build/nvcc_driver.py unless --serial-nvcc), in a fresh build directory, with nvcc's
`--time` report (through PYTORCH_NVCC; the driver writes it the same way), and the table prints seconds per
nvcc stage: the host compiler's preprocessing (both passes), cudafe++ (the host front end), cicc (the device
front end and optimiser), ptxas, fatbinary, the host compile of cudafe++'s output, and the .cu object's ninja
step in all. Where `cuobjdump` is on PATH, the SASS of both builds is compared (the line says `same` or
`DIFFERS`). On a machine without CUDA's libraries the link fails after the .cu object is built; the stages are
measured all the same. This runs nvcc on the sources outside kforge's sandbox: for your own candidates.
"""

from __future__ import annotations

import argparse
import ast
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evaluator.child.loading import build_steps  # noqa: E402
_STAGES = {"gcc (preprocessing 4)": "preprocess", "gcc (preprocessing 1)": "preprocess", "cudafe++": "cudafe++",
           "cicc": "cicc", "ptxas": "ptxas", "fatbinary": "fatbinary", "gcc (compiling)": "host compile",
           "nvlink": "nvlink"}
_COLUMNS = ["preprocess", "cudafe++", "cicc", "ptxas", "fatbinary", "host compile", "cu object"]
_BUILD = """
import json, os, sys
sys.path.insert(0, {root!r})
import torch.utils.cpp_extension as cpp_extension
from evaluator.build import lean_headers, nvcc_driver
if cpp_extension.CUDA_HOME is None:  # a CPU build of torch: nvcc still builds the .cu object
    cpp_extension.CUDA_HOME = os.environ.get("CUDA_HOME", "/usr/local/cuda")
if {lean}:
    lean_headers.install()
if {driver}:
    nvcc_driver.install()
try:
    cpp_extension.load_inline(name="stages", cpp_sources="", cuda_sources=open({source!r}).read(),
                              build_directory={build!r}, verbose=False)
    error = ""
except Exception as exc:
    error = str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else type(exc).__name__
print(json.dumps({{"builds": lean_headers.builds, "error": error}}))
"""


def cuda_sources(path: Path) -> list[tuple[str, str]]:
    """(label, source) of each load_inline cuda_sources in a candidate file that is a literal or a module-level
    name bound to one; a .cu file is its own source."""
    if path.suffix == ".cu":
        return [(path.stem, path.read_text())]
    try:
        tree = ast.parse(path.read_text())
    except SyntaxError:  # a truncated answer: no source to build
        return []
    assigned = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "load_inline":
            value = next((k.value for k in node.keywords if k.arg == "cuda_sources"), None)
            value = assigned.get(value.id, value) if isinstance(value, ast.Name) else value
            try:
                text = ast.literal_eval(value) if value is not None else None
            except ValueError:
                continue
            if text:
                found.append((f"{path.parent.name}/{path.stem}", text if isinstance(text, str) else "\n".join(text)))
    return found


def build(label: str, source: str, variant: str, scratch: Path, driver: bool = True) -> dict:
    """One build of one source in a fresh directory: nvcc's stage times, the ninja step, how it was built."""
    work = Path(tempfile.mkdtemp(prefix=f"{variant}-", dir=scratch))
    (work / "source.cu").write_text(source)
    times = work / "nvcc_time.csv"
    env = {**os.environ, "PYTORCH_NVCC": f"{shutil.which('nvcc') or 'nvcc'} --time {times}",
           "TORCH_CUDA_ARCH_LIST": os.environ.get("TORCH_CUDA_ARCH_LIST", "9.0")}
    script = _BUILD.format(root=str(ROOT), lean=variant == "lean", driver=driver, source=str(work / "source.cu"), build=str(work / "build"))
    (work / "build").mkdir()
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    told = json.loads(run.stdout.strip().splitlines()[-1]) if run.stdout.strip() else {"builds": [], "error": run.stderr[-200:]}
    stages: dict[str, float] = {}
    if times.exists():
        with times.open() as f:
            for row in csv.reader(f):
                row = [c.strip() for c in row]
                if len(row) >= 8 and row[1] in _STAGES and row[-1] == "ms":
                    stages[_STAGES[row[1]]] = stages.get(_STAGES[row[1]], 0.0) + float(row[-2]) / 1e3
    steps = build_steps(work / "build")
    stages["cu object"] = steps.get("cuda.cuda.o", float("nan"))
    return {"source": label, "variant": variant, "how": "; ".join(told["builds"]) or variant, "error": told["error"],
            "stages_s": {k: round(v, 2) for k, v in stages.items()}, "object": str(work / "build" / "cuda.cuda.o")}


def sass(obj: str) -> str | None:
    """The object's SASS without the lines that name the file, or None without cuobjdump or an object."""
    tool = shutil.which("cuobjdump") or str(Path(shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc").resolve().parent / "cuobjdump")
    if not Path(tool).exists() or not Path(obj).exists():
        return None
    out = subprocess.run([tool, "-sass", obj], capture_output=True, text=True).stdout
    return "\n".join(line for line in out.splitlines() if "identifier" not in line and "Fatbin" not in line)


def _table(rows: list[dict]) -> str:
    head = ["source", "build", *_COLUMNS, "SASS"]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in rows:
        cells = [f"{r['stages_s'].get(c, float('nan')):.2f}" for c in _COLUMNS]
        lines.append(" | ".join([r["source"], r["how"][:60], *cells, r.get("sass", "")]))
    for variant in sorted({r["variant"] for r in rows}):
        cu = [r["stages_s"]["cu object"] for r in rows if r["variant"] == variant and r["stages_s"].get("cu object") == r["stages_s"].get("cu object")]
        if cu:
            lines.append(f"{variant}: median .cu object {statistics.median(cu):.2f} s over {len(cu)} sources")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--variants", default="full,lean")
    ap.add_argument("--parallel", type=int, default=1, help="builds at once (each is one nvcc chain)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--serial-nvcc", action="store_true", help="nvcc's steps one after the other, as nvcc runs them "
                    "(default: through evaluator/build/nvcc_driver.py, as kforge builds)")
    args = ap.parse_args()
    files = args.files or sorted((ROOT / "benchmarks" / "compile_set").glob("*.cu"))
    sources = [s for f in files for s in cuda_sources(f)]
    variants = args.variants.split(",")
    with tempfile.TemporaryDirectory(prefix="kforge-stages-") as scratch, ThreadPoolExecutor(args.parallel) as pool:
        rows = list(pool.map(lambda job: build(*job, Path(scratch), not args.serial_nvcc), [(l, s, v) for l, s in sources for v in variants]))
        for label, _ in sources:
            built = {r["variant"]: sass(r["object"]) for r in rows if r["source"] == label}
            if None not in built.values() and len(built) > 1:
                same = len(set(built.values())) == 1
                for r in rows:
                    if r["source"] == label:
                        r["sass"] = "same" if same else "DIFFERS"
    print(_table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
