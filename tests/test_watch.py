"""A batch a user can watch: in a real 80x24 terminal each verdict prints above a live bar whose ETA shows a time
and whose queued compiles read as queued; and every wait for a device another process holds names the holder (or
who is next), the place in line and an estimate."""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
import uuid

from conftest import ROOT, kforge_runner

_CANDIDATE = '''import ctypes  # could load a kernel: judged by running it
import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * {n}.0 / {n}.0
'''
_CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _in_terminal(args: list[str], env: dict, timeout: float = 600) -> list[str]:
    """What `python -m kforge ARGS` draws on stderr in an 80x24 pty, as the frames a terminal shows in turn
    (cursor moves stripped, one entry per line or carriage-return redraw)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")} | {"TERM": "xterm-256color"}
    proc = subprocess.Popen([sys.executable, "-m", "kforge", *args], stdin=slave, stdout=subprocess.DEVNULL,
                            stderr=slave, env=env)
    os.close(slave)
    raw, deadline = b"", time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.5)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the child closed its end
                    break
                raw += chunk
            elif proc.poll() is not None:
                break
        assert proc.wait(timeout=60) == 0, raw.decode(errors="replace")[-3000:]
    finally:
        proc.kill()
        os.close(master)
    return [frame.strip() for frame in re.split(r"[\r\n]+", _CSI.sub("", raw.decode(errors="replace"))) if frame.strip()]


def test_verdicts_print_above_a_live_bar_with_queued_compiles_and_a_timed_eta(tmp_path, build_root):
    tree = tmp_path / "sols" / "relu"
    tree.mkdir(parents=True)
    for n in (1, 2, 3):
        (tree / f"plain_{n}.py").write_text(_CANDIDATE.format(n=n))
    kforge = kforge_runner(tmp_path, build_root)
    frames = _in_terminal(["evaluate", str(tree.parent), "--device", "cpu", "--jobs", "1"], kforge.env)
    verdicts = [i for i, frame in enumerate(frames) if frame.startswith("kforge: [")]
    assert [re.fullmatch(r"kforge: \[(\d)/3\] relu plain_\d\.py: \w+ \(\d+ s\)", frames[i]).group(1)
            for i in verdicts] == ["1", "2", "3"], frames
    bars = [i for i, frame in enumerate(frames) if "/3 " in frame and " eta " in frame]
    assert max(len(frames[i]) for i in bars + verdicts) <= 80, frames
    assert bars and bars[0] < verdicts[0], frames  # the bar shows before the first verdict ...
    assert all(i + 1 in bars for i in verdicts[:-1]), frames  # ... and is drawn again under each verdict
    assert any(re.search(r"1 compiling, 2 queued .* 0/3 ", frames[i]) for i in bars), frames
    timed = [frames[i] for i in bars if i > verdicts[0] and re.search(r" eta \d+:\d\d:\d\d$", frames[i])]
    assert timed, frames  # a time once one candidate has run, not -:--:--
    assert "kforge: judged 3 of 3 in" in frames[-1]


_LEASE = """
import logging, sys, time
from evaluator.parent.leases import Lease
logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
lease = Lease(None)
lease.name = sys.argv[1]  # a device of this test's own: no other kforge process waits behind it
if sys.argv[2] == "ask":  # asks once and stays in line without asking again
    assert lease.take() is None
    print("in line", flush=True)
    sys.stdin.read()
else:  # takes it (in its turn), holds it until told, gives it back
    while (fd := lease.take()) is None:
        time.sleep(0.05)
    print("held", flush=True)
    sys.stdin.readline()
    Lease.give_back(fd)
    print("given back", flush=True)
    sys.stdin.read()
"""


def _party(device: str, role: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _LEASE, device, role], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def _said(proc: subprocess.Popen, until: str) -> list[str]:
    lines = []
    while not lines or lines[-1] != until:
        lines.append(proc.stdout.readline().rstrip("\n"))
        assert lines[-1] or proc.poll() is None, lines
    return lines[:-1]


def test_every_wait_names_the_holder_its_place_and_an_estimate(tmp_path, build_root):
    from evaluator.parent.leases import LOCK_DIR

    device = f"test-{uuid.uuid4().hex[:12]}"
    parties: list[subprocess.Popen] = []

    def party(role: str, until: str) -> tuple[subprocess.Popen, list[str]]:
        parties.append(_party(device, role))
        return parties[-1], _said(parties[-1], until)

    def tell(proc: subprocess.Popen, until: str) -> None:
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert _said(proc, until) == []

    try:
        first, _ = party("hold", "held")
        early, (said,) = party("ask", "in line")
        assert f"held by pid {first.pid} (-c" in said and "place 1 in line" in said and "no estimate yet" in said, said
        early.kill()  # out of the line: a dead process's ticket counts for nothing
        early.wait()
        time.sleep(1.0)
        tell(first, "given back")  # a hold of about a second, noted for the estimates
        holder, _ = party("hold", "held")
        waiting = []
        for place in (1, 2):
            proc, (said,) = party("ask", "in line")
            waiting.append(proc)
            assert f"held by pid {holder.pid} (-c" in said and f"place {place} in line" in said, said
            assert re.search(r"about \d+ s to wait \(its last 1 holds took 1 s on average\)", said), said
        tell(holder, "given back")
        _, (said,) = party("ask", "in line")  # between holds: the first in line has not taken it yet
        assert f"between holds, next: pid {waiting[0].pid} (-c" in said and "place 3 in line" in said, said
        assert re.search(r"about \d+ s to wait \(its last 2 holds took 1 s on average\)", said), said
        status = kforge_runner(tmp_path, build_root)("status").stdout.splitlines()
        mine = status.index(next(line for line in status if line.startswith(f"{device}: ")))
        assert status[mine].startswith(f"{device}: between holds, next: pid {waiting[0].pid} "), status
        assert [line.split(". ")[0] for line in status[mine + 1:mine + 4]] == ["  1", "  2", "  3"], status
        assert all(re.search(r": about \d+ s to wait", line) for line in status[mine + 1:mine + 4]), status
    finally:
        for proc in parties:
            proc.kill()
            proc.wait()
        for path in (LOCK_DIR / (device + ".line")).glob("*"):
            path.unlink()
        (LOCK_DIR / (device + ".line")).rmdir()
        (LOCK_DIR / device).unlink(missing_ok=True)
