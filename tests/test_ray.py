"""The Ray backend against a real local Ray cluster (a head node started here, on the CPU): candidates are
shipped as text, evaluated inside Ray workers, and stored by the driver (`kforge evaluate --runner ray`, and
`kforge serve --runner ray` with its queue)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT, SOLUTIONS, kforge_runner, running
from db import Database
from kforge_server import Server, token_file

if not os.environ.get("KFORGE_REQUIRE_RAY"):
    pytest.importorskip("ray", reason="the Ray backend is an optional extra (pip install 'kforge[ray]')")

RAISER = """import ctypes  # a loader in reach: judged by running it, not from its code

import torch


class ModelNew(torch.nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, x):
        raise ValueError("boom from a Ray worker")
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    """A head node of its own (short temp dir: Ray's socket paths must fit in 107 bytes), stopped afterwards."""
    port, temp = _free_port(), f"/tmp/kf-ray-{secrets.token_hex(3)}"
    head = subprocess.Popen(
        [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
         "--num-gpus=0", f"--temp-dir={temp}", "--include-dashboard=false", "--disable-usage-stats"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        os.killpg(head.pid, signal.SIGINT)  # as Ctrl-C stops `ray start --block`: 2 s here (SIGTERM: over 30 s)
        try:
            head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)


def test_ray_backend_evaluates_in_workers_and_the_driver_stores(ray_address: str, tmp_path: Path, build_root: Path) -> None:
    cands = tmp_path / "scale_bias_hardswish"
    cands.mkdir()
    for name in ("cpu_fused_o3.py", "cpu_wrong.py"):
        (cands / name).write_bytes((SOLUTIONS / "scale_bias_hardswish" / name).read_bytes())
    (cands / "raiser.py").write_text(RAISER)
    (cands / "cut_off.py").write_text("import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return (x")
    url = f"sqlite:///{tmp_path / 'kforge.db'}"
    env = os.environ | {"KFORGE_BUILD_ROOT": str(build_root), "RAY_ADDRESS": ""}
    cmd = [sys.executable, "-m", "kforge", "evaluate", str(tmp_path), "--device", "cpu", "--json", "--db", url,
           "--runner", "ray", "--address", ray_address]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = {Path(ln["path"]).name: ln for ln in map(json.loads, proc.stdout.splitlines())}
    assert {k: v["status"] for k, v in lines.items()} == {
        "cpu_fused_o3.py": "correct", "cpu_wrong.py": "incorrect", "raiser.py": "runtime_error", "cut_off.py": "truncated"}
    assert lines["cpu_fused_o3.py"]["speedup"] > 0
    with Database(url) as database:
        rows = {Path(r.solution_path).name: r for r in database.evaluations()}
    assert set(rows) == set(lines) and all(r.solution_path.startswith(str(tmp_path)) for r in rows.values())
    tail = rows["raiser.py"].evidence["log_tail"]  # the traceback names the worker's own copy, not the driver's file
    assert "/src/raiser.py" in tail and str(tmp_path) not in tail


def test_an_unreachable_ray_address_fails_in_seconds_with_one_line(tmp_path: Path) -> None:
    """Nothing listens on the port: kforge says so at once (Ray alone would retry for minutes), exit 2."""
    (tmp_path / "relu").mkdir()
    (tmp_path / "relu" / "c.py").write_text(RAISER)  # a candidate, so the cluster is asked for
    cmd = [sys.executable, "-m", "kforge", "evaluate", str(tmp_path), "--device", "cpu", "--db", f"sqlite:///{tmp_path / 'k.db'}",
           "--runner", "ray", "--address", f"127.0.0.1:{_free_port()}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "cannot reach a Ray cluster at 127.0.0.1:" in proc.stderr and "Traceback" not in proc.stderr


def test_a_server_judges_its_queue_on_the_ray_cluster(ray_address: str, tmp_path: Path, build_root: Path) -> None:
    """`kforge serve --runner ray`: its jobs are judged in the cluster's workers, with the statuses `kforge
    evaluate` gives them there; the server itself starts no evaluator child (no fork server of its own)."""
    run = kforge_runner(tmp_path, build_root)
    tokens = token_file(tmp_path / "tokens", ["alice"])
    server = Server(tmp_path, run.env | {"RAY_ADDRESS": ""}, run.db_url, tmp_path / "tokens", "--runner", "ray",
                    "--address", ray_address)
    try:
        client = server.client(tokens["alice"])
        codes = [(SOLUTIONS / "scale_bias_hardswish" / "cpu_wrong.py").read_text(), RAISER]
        ids = [client.submit(code, problem="scale_bias_hardswish").id for code in codes]
        verdicts = [client.wait(job_id, every_s=0.5, timeout_s=900).verdict for job_id in ids]
        assert [v.status.value for v in verdicts] == ["incorrect", "runtime_error"], server.text()[-3000:]
        assert "boom from a Ray worker" in verdicts[-1].evidence.log_tail
        assert not [pid for pid in running("evaluator.child") if _parent(pid) == server.proc.pid]
    finally:
        server.stop()


def _parent(pid: str) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1
