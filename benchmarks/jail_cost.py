"""What the jail costs per child: `python -c pass` started plain and through evaluator/jail.py, interleaved, and
the same with `import torch` (a child's real start). Prints one JSON object of medians in ms."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from evaluator.sandbox import _jailed, jail_spec, probe_layers  # noqa: E402


def _once(cmd: list[str], cwd: str) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    return (time.perf_counter() - started) * 1e3


def main(reps: int = 20) -> None:
    with tempfile.TemporaryDirectory() as root:
        Path(root).chmod(0o711)
        scratch = Path(root) / "child"
        scratch.mkdir()
        spec = jail_spec([scratch], [])
        out = {"layers": probe_layers(Path(root))}
        for name, code in (("pass", "pass"), ("import_torch", "import torch")):
            plain, jailed = [], []
            for _ in range(reps):  # interleaved: drift hits both
                plain.append(_once([sys.executable, "-c", code], str(scratch)))
                jailed.append(_once(_jailed(spec, [sys.executable, "-c", code]), str(scratch)))
            out[name] = {"plain_ms": round(statistics.median(plain), 1), "jailed_ms": round(statistics.median(jailed), 1),
                         "cost_ms": round(statistics.median(jailed) - statistics.median(plain), 1), "reps": reps}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
