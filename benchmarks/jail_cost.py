"""What the jail costs per child: `python -c pass` started plain and through evaluator/sandbox/jail.py, interleaved, and
the same with `import torch` (a child's real start). A jailed start includes what a candidate child gets: its
cgroup made, joined and removed, and its view of a build cache mounted. Then whole evaluator children (jail,
interpreter, torch, kforge's modules) started alone and eight at once, as a batch starts them, each way: forked
from the fork server (the first of them waits for the server's own start) and as its own interpreter (exec):
seconds from the spawn to the child's `setup` mark (its request read). Prints one JSON object of medians in ms.

    python benchmarks/jail_cost.py [REPS] [--together N]"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from evaluator.parent import buildcache  # noqa: E402
from evaluator.sandbox import cgroups, forkserver
from evaluator.contracts import Limits  # noqa: E402
from evaluator.parent.jail_spec import jail_spec, probe_layers  # noqa: E402
from evaluator.protocol import IntrospectRequest  # noqa: E402
from evaluator.sandbox.spawn import Child, jailed  # noqa: E402


def _once(cmd: list[str], cwd: str) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    return (time.perf_counter() - started) * 1e3


def _jailed_once(spec: dict, cmd: list[str], cwd: str) -> float:
    started = time.perf_counter()
    group, said = cgroups.for_child(Limits().processes, Limits().memory_mb)
    subprocess.run(jailed(spec, cmd, group, said), cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    if group:
        group.close()
    return (time.perf_counter() - started) * 1e3


def _children_at_once(root: Path, n: int) -> list[float]:
    """Seconds from spawning each of `n` jailed evaluator children (all at once) to its `setup` mark. They are
    given an introspection of no file: each reads its request, says `setup`, and ends."""
    workdirs = [root / f"at-once-{n}-{i}" for i in range(n)]
    children = [Child(w, w / "build", Limits(), cap_address_space=False, jail=jail_spec([w], [])) for w in workdirs]
    seconds = []
    for child in children:  # all spawned before the first begin(), which waits for that child to load
        child.begin(IntrospectRequest(problem_paths=[]))
        setup = child.wait_for("stage")
        child.finish()
        seconds.append(round(setup["_t"] - child.result.spawned, 3) if setup else float("nan"))
    return seconds


def main(reps: int = 20, together: int = 8) -> None:
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
        for launch, forked in (("forked", True), ("exec", False)):  # from the fork server (its start: the first), or not
            forkserver.use(forked)
            out[launch] = {"child_alone_s": [_children_at_once(Path(root), 1)[0] for _ in range(3)],
                           f"children_{together}_at_once_s": _children_at_once(Path(root), together)}
    print(json.dumps(out))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reps", nargs="?", type=int, default=20)
    parser.add_argument("--together", type=int, default=8)
    args = parser.parse_args()
    main(args.reps, args.together)
