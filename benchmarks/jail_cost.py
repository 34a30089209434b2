"""What the jail costs per child: `python -c pass` started plain and through evaluator/jail.py, interleaved, and
the same with `import torch` (a child's real start). A jailed start includes what a candidate child gets: its
cgroup made, joined and removed, and its view of a build cache mounted. Prints one JSON object of medians in ms."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from evaluator import buildcache, resources  # noqa: E402
from evaluator.contracts import Limits  # noqa: E402
from evaluator.sandbox import _jailed, jail_spec, probe_layers  # noqa: E402


def _once(cmd: list[str], cwd: str) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    return (time.perf_counter() - started) * 1e3


def _jailed_once(spec: dict, cmd: list[str], cwd: str) -> float:
    started = time.perf_counter()
    group, said = resources.for_child(Limits().processes, Limits().memory_mb)
    subprocess.run(_jailed(spec, cmd, group, said), cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    if group:
        group.close()
    return (time.perf_counter() - started) * 1e3


def main(reps: int = 20) -> None:
    with tempfile.TemporaryDirectory() as root:
        Path(root).chmod(0o711)
        scratch = Path(root) / "child"
        scratch.mkdir()
        view = buildcache.view(Path(root) / "builds", Path(root) / "builds" / "key", scratch, keep=False)
        spec = jail_spec([scratch], [], view=view)
        out = {"layers": probe_layers(Path(root))}
        for name, code in (("pass", "pass"), ("import_torch", "import torch")):
            plain, jailed = [], []
            for _ in range(reps):  # interleaved: drift hits both
                plain.append(_once([sys.executable, "-c", code], str(scratch)))
                jailed.append(_jailed_once(spec, [sys.executable, "-c", code], str(scratch)))
            out[name] = {"plain_ms": round(statistics.median(plain), 1), "jailed_ms": round(statistics.median(jailed), 1),
                         "cost_ms": round(statistics.median(jailed) - statistics.median(plain), 1), "reps": reps}
    print(json.dumps(out))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
