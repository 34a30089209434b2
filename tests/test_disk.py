"""A candidate's disk (evaluator/sandbox/disk.py), with real mounts and real jailed children: one mounted after the
comparer started reaches it, as it must (the comparer reads outputs a CPU candidate writes in its disk), where a
child in a mount namespace of its own would not see it; the jail reports the layer off where a dir the child may
write lies outside its disk; what a killed kforge left mounted is released by the next batch. The quota itself,
against hostile candidates: tests/test_budgets.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evaluator.contracts import EvalSettings
from evaluator.parent.jail_spec import jail_spec
from evaluator.sandbox import disk
from evaluator.sandbox.spawn import _JAIL, scrubbed_env
from reference_problems import resolve_problem

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="kforge mounts a child's disk only as root")

_WAITS = '''
import os, sys, time
for _ in range(100):
    if os.path.exists(sys.argv[1]):
        print(open(sys.argv[1]).read())
        break
    time.sleep(0.05)
else:
    print("not seen")
'''


def _mounted(path: Path) -> bool:
    return any(line.split()[4] == str(path) for line in Path("/proc/self/mountinfo").read_text().splitlines())


def _jailed(spec: dict, cwd: Path, *args: str) -> subprocess.Popen:
    cmd = [sys.executable, str(_JAIL), json.dumps(spec), "--", sys.executable, *args]
    return subprocess.Popen(cmd, cwd=cwd, env=scrubbed_env(cwd, cwd, "t"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_the_comparer_sees_a_disk_mounted_after_it_started(tmp_path):
    """A stream's candidates arrive after their problem's comparer started: their disks, and the outputs in them,
    appear to it (the reference's jail keeps kforge's namespaces), not to a child with a mount namespace of its own."""
    from evaluator.parent.batch import Batch

    batch = Batch(EvalSettings(device="cpu", build_root=tmp_path / "builds"))
    try:
        ref = batch.root / "ref"
        (ref / "build").mkdir(parents=True)
        out = batch.root / "cand00000" / "cand00000" / "out" / "trial_0.out"
        comparer = _jailed(batch.jail(ref, ref / "build", resolve_problem("relu")), ref, "-c", _WAITS, str(out))
        own = _jailed(jail_spec([ref], [batch.root]), ref, "-c", _WAITS, str(out))
        time.sleep(1)  # both in their jails by now
        assert "dir" in batch.disks.get(batch.new_disk(batch.root / "cand00000"), {})
        out.parent.mkdir(parents=True)
        out.write_text("handed over")
        assert comparer.communicate(timeout=60)[0].strip() == "handed over"
        assert own.communicate(timeout=60)[0].strip() == "not seen"
    finally:
        batch.release()
    assert not _mounted(batch.root / "cand00000") and not batch.root.exists()


def test_the_disk_layer_is_off_where_a_dir_the_child_writes_lies_outside_its_disk(tmp_path):
    own, outside = tmp_path / "cand", tmp_path / "elsewhere"
    own.mkdir()
    outside.mkdir()
    in_disk = disk.mount(own)
    try:
        (own / "run").mkdir()
        code = "import json, os; print(os.environ['KFORGE_JAIL'])"
        for write, said in (([own / "run"], in_disk["said"]), ([own / "run", outside], f"off: {outside} is not in")):
            spec = jail_spec(write, []) | {"disk": in_disk}
            out, err = _jailed(spec, own / "run", "-c", code).communicate(timeout=60)
            assert json.loads(out)["disk"].startswith(said), err
    finally:
        disk.release(own)


def test_what_a_killed_kforge_left_mounted_is_released_by_the_next_batch(tmp_path):
    """A batch's root is named for its process: the disks in one whose process is gone (SIGKILL: no cleanup ran)
    are released, a live process's stay."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead, alive = tmp_path / f"kforge-eval-{gone.stdout.strip()}-x", tmp_path / f"kforge-eval-{os.getpid()}-y"
    for root in (dead, alive):
        (root / "cand00000").mkdir(parents=True)
        assert "dir" in disk.mount(root / "cand00000")
        (root / "cand00000" / "held").write_bytes(b"x" * 2**20)
    try:
        disk.sweep(tmp_path)
        assert not _mounted(dead / "cand00000") and not (dead / "cand00000").exists()
        assert _mounted(alive / "cand00000") and (alive / "cand00000" / "held").exists()
    finally:
        disk.release(alive)
