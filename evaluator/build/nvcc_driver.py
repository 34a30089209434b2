"""nvcc, with its host and device front ends run side by side: nvcc's own commands, two chains at once.

For one GPU architecture nvcc runs its steps one after the other: the host preprocessor, cudafe++ (the host front
end, which writes the translation unit's module id), the device preprocessor, cicc (the device front end and
optimiser, which reads that id), ptxas, fatbinary, and last the host compile of cudafe++'s output, which includes
cicc's stub and the fatbinary. cudafe++ and cicc each parse the whole translation unit: with the lean headers they
were 4.4 and 3.9 s of a .cu's ~14 s on an H100 host building 8 at once (benchmarks/compile_stages.py).

The module id is a function of the source that cicc computes the same way when asked (`--gen_module_id_file`),
so this driver runs [host preprocess, cudafe++] beside [device preprocess, cicc writing its own id, ptxas,
fatbinary], checks that the two ids are the same (if not, cicc's chain runs again reading cudafe++'s id, as nvcc
would run it), then the host compile. Every command is nvcc's own, read from `nvcc --dryrun` with the same
arguments, in a private --keep-dir: the object is the one nvcc builds (tests/test_nvcc_driver.py compares them).

Output and exit status are nvcc's: the steps' messages in nvcc's order, and a failing step stops the build as in
nvcc (cudafe++'s error is the one reported when both front ends reject the source). Anything this driver does not
know the shape of (several architectures, -dc, -E, --version, another step) is nvcc's to run, unchanged.
`--time FILE` is written in nvcc's format, one row per step (the chains overlap, so rows add up to more than the
wall time). Standard library only: ninja starts it for every .cu, inside the compile child's sandbox.

Usage (as PYTORCH_NVCC): python -I nvcc_driver.py /path/to/nvcc [nvcc arguments...]
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

_SHAPE = ("preprocess host", "cudafe++", "preprocess device", "cicc", "ptxas", "fatbinary", "compile host")
_PHASE = {"preprocess host": "gcc (preprocessing 4)", "cudafe++": "cudafe++", "preprocess device": "gcc (preprocessing 1)",
          "cicc": "cicc", "ptxas": "ptxas", "fatbinary": "fatbinary", "compile host": "gcc (compiling)"}
_ASSIGNMENT = re.compile(r"^([A-Za-z_]\w*)=(.*)$")
_MODULE_ID = re.compile(r'--module_id_file_name ("[^"]*"|\S+)')
# part of the build cache's key (evaluator/parent/batch.py): each build.ninja names this file (_COMMAND), so moving
# it makes another build (the old key's build.ninja would have ninja rebuild in the candidate child)
VERSION = "side-by-side-2"
_OWN_ID = ".cicc"  # suffix of the id file cicc writes for itself
_COMMAND = f"{shlex.quote(sys.executable)} -I {shlex.quote(os.path.abspath(__file__))}"


@dataclass
class Step:
    kind: str
    command: str
    seconds: float = 0.0
    code: int = 0
    output: bytes = b""

    def run(self, env: dict[str, str]) -> bool:
        start = time.perf_counter()
        done = subprocess.run(["/bin/sh", "-c", self.command], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.seconds, self.code, self.output = time.perf_counter() - start, done.returncode, done.stdout
        return self.code == 0


def _kind(command: str) -> str | None:
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    program = os.path.basename(words[0]) if words else ""
    if program in ("cudafe++", "cicc", "ptxas", "fatbinary", "rm"):
        return program
    if "-E" in words:
        return "preprocess device" if any(w.startswith("-D__CUDA_ARCH__=") for w in words) else "preprocess host"
    return "compile host" if "-c" in words else None


def plan(dryrun: str) -> tuple[dict[str, str], list[Step]] | None:
    """nvcc's environment and steps from its --dryrun listing, or None when they are not the one shape known."""
    env, steps = {}, []
    for line in dryrun.splitlines():
        if not line.startswith("#$ "):
            continue
        text = line[3:].strip()
        if (found := _ASSIGNMENT.match(text)) and " " not in found.group(1):
            try:
                words = shlex.split(found.group(2))
            except ValueError:
                continue
            if len(words) == 1:  # nvcc.profile's lists (INCLUDES=...) are already spelled out in the commands
                env[found.group(1)] = words[0]
            continue
        kind = _kind(text)
        if kind != "rm":  # the fatbinary's leftover: the keep-dir goes as a whole
            steps.append(Step(kind or "unknown", text))
    if tuple(s.kind for s in steps) != _SHAPE or len(_MODULE_ID.findall(steps[3].command)) != 1:
        return None
    return env, steps


def _own_id(cicc: Step) -> tuple[Step, str]:
    """cicc's command writing its own module id beside cudafe++'s, and that file's path."""
    found = _MODULE_ID.search(cicc.command)
    path = shlex.split(found.group(1))[0] + _OWN_ID
    command = cicc.command[:found.start()] + f"--gen_module_id_file --module_id_file_name {shlex.quote(path)}" + cicc.command[found.end():]
    return Step("cicc", command), path


def _chain(steps: list[Step], env: dict[str, str]) -> bool:
    return all(step.run(env) for step in steps)


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _ran(steps: list[Step]) -> list[Step]:
    return [s for s in steps if s.seconds]


def build(env: dict[str, str], steps: list[Step]) -> list[Step]:
    """Run the steps as two chains, then the host compile. Returns the steps that ran, in nvcc's order."""
    host, device, compile_host = steps[:2], steps[2:6], steps[6]
    cicc, own = _own_id(device[1])
    beside = [device[0], cicc, *(Step(s.kind, s.command) for s in device[2:])]
    with ThreadPoolExecutor(1) as pool:
        device_done = pool.submit(_chain, beside, env)
        host_ok = _chain(host, env)
        device_ok = device_done.result()
    if not host_ok:
        return _ran(host)
    mine, theirs = _read(own), _read(shlex.split(_MODULE_ID.search(device[1].command).group(1))[0])
    if device_ok and mine is not None and mine == theirs:
        device = beside
    elif not _chain(device[1:], env):  # cicc again, reading cudafe++'s id, as nvcc runs it
        return _ran(host + device)
    compile_host.run(env)
    return _ran(host + device + [compile_host])


def _time_rows(steps: list[Step], source: str, output: str) -> str:
    rows = [f"{source} , {_PHASE[s.kind]} ,  ,  ,  , nvcc , {s.seconds * 1e3:.4f} , ms" for s in steps]
    return "\n".join(["source file name , phase name , phase input files , phase output file , arch , tool, metric , unit", *rows,
                      f" , nvcc (driver) ,  , {output} ,  , nvcc , 0.0 , ms"]) + "\n"


def _without_time(args: list[str]) -> tuple[list[str], str | None]:
    for flag in ("--time", "-time"):
        if flag in args and args.index(flag) + 1 < len(args):
            i = args.index(flag)
            return args[:i] + args[i + 2:], args[i + 1]
    return args, None


def install() -> None:
    """Have torch's build.ninja start nvcc through this driver (PYTORCH_NVCC, read when torch writes it). Both
    roles of a child call it, so the candidate child writes the compile child's build.ninja and ninja rebuilds
    nothing. A PYTORCH_NVCC already set (benchmarks/compile_stages.py adds --time) is kept as the nvcc to drive."""
    import torch.utils.cpp_extension as cpp_extension

    nvcc = os.environ.get("PYTORCH_NVCC") or (cpp_extension.CUDA_HOME and shlex.quote(os.path.join(cpp_extension.CUDA_HOME, "bin", "nvcc")))
    if nvcc and not nvcc.startswith(_COMMAND):
        os.environ["PYTORCH_NVCC"] = f"{_COMMAND} {nvcc}"


def main(argv: list[str]) -> int:
    nvcc, args = argv[0], argv[1:]
    args, timing = _without_time(args)
    with tempfile.TemporaryDirectory(prefix="kforge-nvcc-") as keep:
        listing = subprocess.run([nvcc, *args, "--dryrun", "--keep", "--keep-dir", keep],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        planned = plan(listing.stdout) if listing.returncode == 0 else None
        if planned is None:
            os.execv(nvcc, [nvcc, *argv[1:]])
        env, steps = planned
        ran = build({**os.environ, **env}, steps)
    for step in ran:
        sys.stdout.buffer.write(step.output)
    sys.stdout.flush()
    failed = next((s for s in ran if s.code), None)
    if timing:
        with open(timing, "a") as f:
            f.write(_time_rows(ran, next((a for a in args if a.endswith(".cu")), "?"), args[args.index("-o") + 1] if "-o" in args else ""))
    return 0 if failed is None else (failed.code if failed.code > 0 else 1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
