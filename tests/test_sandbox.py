"""The jail, tested with real hostile candidates doing the real thing, each checked from outside.

Every candidate here tries its attack both while it compiles (at import) and while it runs. If any attempt
succeeds, forward() raises naming it, so the verdict says `runtime_error: ... escaped: [...]`; `correct` means
every attempt was refused by the kernel. Effects are also checked from outside (files, rows, listeners, /proc).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import COMPILED_RELU, ROOT, kforge_runner, running
from evaluator import CandidateJob, EvalSettings, Status, Verdict, evaluate
from evaluator.contracts import Limits
from evaluator.parent.jail_spec import probe_layers
from reference_problems import resolve_problem

# A secret of kforge's process from its first moments (an API key would be in its environment): children are
# forked from a server that never held kforge's memory (evaluator/sandbox/forkserver.py), so none may find it in its own.
# Its two halves are apart everywhere but here, so that a candidate can look for it without making it.
SECRET_HEAD, SECRET_TAIL = "kf0rge-s3cret-", "d0-n0t-l3ak"
os.environ["KFORGE_TEST_SECRET"] = SECRET_HEAD + SECRET_TAIL

# The jail's layers on this machine. Without a PID namespace the module skips, unless KFORGE_REQUIRE_SANDBOX is set
# (CI sets it: there every test here must run): then any kernel-enforced layer missing (the PID namespace, Landlock,
# seccomp, the cgroup limits, the cache overlay, capabilities, /proc; `identity` is reported, not required, as in
# strict mode) fails every test of the module, and the root-only test fails where it is not run as root.
REQUIRE_SANDBOX = bool(os.environ.get("KFORGE_REQUIRE_SANDBOX"))
LAYERS = probe_layers(Path("/tmp"))
MISSING = {k: v for k, v in LAYERS.items() if k != "identity" and not v.startswith("on")} \
    | ({} if "pid" in LAYERS else {"pid": "off: not reported by the probe"})

pytestmark = pytest.mark.skipif(not REQUIRE_SANDBOX and not LAYERS.get("pid", "").startswith("on"),
                                reason="this kernel gives no PID namespace to the jail (CI sets KFORGE_REQUIRE_SANDBOX:"
                                       " there it must run)")


@pytest.fixture(autouse=True, scope="module")
def every_layer_where_required() -> None:
    if REQUIRE_SANDBOX and MISSING:
        pytest.fail("KFORGE_REQUIRE_SANDBOX is set and the jail lacks: "
                    + "; ".join(f"{k} {v}" for k, v in MISSING.items()), pytrace=False)


HEADER = '''
import ctypes, glob, os, signal, socket, sqlite3
import torch.nn as nn
from tests.adversarial.tiny_ext import ext

ESCAPED = []


def attempt(name, action):
    try:
        action()
        ESCAPED.append(name)
    except Exception:
        pass


def write(path):
    with open(path, "w") as fh:
        fh.write("escaped")


def attack():
'''
FOOTER = '''

attack()


class ModelNew(nn.Module):
    def forward(self, x):
        if not hasattr(self, "done"):
            self.done = attack() or True
        if ESCAPED:
            raise RuntimeError(f"escaped: {sorted(set(ESCAPED))}")
        return ext.relu(x)
'''


def _candidate(directory: Path, name: str, body: str) -> Path:
    path = directory / f"{name}.py"
    path.write_text(HEADER + "\n".join("    " + line for line in body.strip().splitlines()) + FOOTER)
    return path


class Listeners:
    """What a host service looks like: a TCP listener on 127.0.0.1, an abstract and a path unix socket (the way
    tmux, docker and systemd listen) and a path datagram socket (syslog's way), counting what reaches them."""

    def __init__(self, base: Path):
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.abstract, self.path, self.dgram_path = f"kforge-test-{os.getpid()}", str(base / "svc.sock"), str(base / "log.sock")
        self.unix, self.path_unix = socket.socket(socket.AF_UNIX), socket.socket(socket.AF_UNIX)
        self.unix.bind("\0" + self.abstract)
        self.path_unix.bind(self.path)
        self.dgram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.dgram.bind(self.dgram_path)
        self.accepted = 0
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._accept, args=(s,), daemon=True) for s in (self.tcp, self.unix, self.path_unix)]
        self.threads.append(threading.Thread(target=self._receive, daemon=True))
        for t in self.threads:
            t.start()

    def _accept(self, server: socket.socket) -> None:
        server.listen()
        server.settimeout(0.2)
        while not self.stop.is_set():
            try:
                server.accept()[0].close()
                self.accepted += 1
            except OSError:
                continue

    def _receive(self) -> None:
        self.dgram.settimeout(0.2)
        while not self.stop.is_set():
            try:
                self.dgram.recv(64)
                self.accepted += 1
            except OSError:
                continue

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()
        for s in (self.tcp, self.unix, self.path_unix, self.dgram):
            s.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory, adversarial_build_root) -> dict:
    """Things a candidate must not reach: a db with rows, a secret, a home, listeners; and the batch's verdicts."""
    build_root = adversarial_build_root
    base = tmp_path_factory.mktemp("world")
    (base / "db").mkdir()
    db = base / "db" / "kforge.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE evaluation (id INTEGER PRIMARY KEY, status TEXT)")
        conn.executemany("INSERT INTO evaluation (status) VALUES (?)", [("correct",)] * 5)
    (base / ".kforge").mkdir()
    (base / ".kforge" / "secret").write_text("api-key")
    listeners = Listeners(base)
    planted = ROOT / f".env.kforge-test-{os.getpid()}"  # a user's .env, or db, kept in the checkout
    targets = [base / "home_marker", Path(f"/tmp/kforge-escape-{os.getpid()}"), base / "db" / "planted",
               build_root / "poisoned", Path(f"/dev/shm/kforge-escape-{os.getpid()}"), Path(f"/var/tmp/kforge-escape-{os.getpid()}")]
    hostile = base / "hostile"
    hostile.mkdir()
    bodies = {
        "writes": "\n".join(f"attempt('write {t}', lambda: write({str(t)!r}))" for t in targets)
                  + "\nattempt('write another scratch', lambda: write(os.getcwd().split('/cand')[0] + '/cand00001/x'))",
        "reads_secret": f"attempt('read secret', lambda: open({str(base / '.kforge' / 'secret')!r}).read())\n"
                        "attempt('read /etc/shadow', lambda: open('/etc/shadow').read())\n"
                        "attempt('read a disk', lambda: open(sorted(glob.glob('/dev/[sv]d[a-z]') + glob.glob('/dev/nvme0n1'))[0], 'rb').read(1))",
        "network": f"attempt('tcp', lambda: socket.create_connection(('127.0.0.1', {listeners.tcp.getsockname()[1]}), timeout=2))\n"
                   f"attempt('abstract unix', lambda: socket.socket(socket.AF_UNIX).connect('\\0{listeners.abstract}'))\n"
                   "attempt('udp', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', 9)))\n"
                   f"attempt('path unix', lambda: socket.socket(socket.AF_UNIX).connect({listeners.path!r}))\n"
                   f"attempt('datagram', lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b'x', {listeners.dgram_path!r}))\n"
                   f"attempt('sendmsg', lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendmsg([b'x'], [], 0, {listeners.dgram_path!r}))\n"
                   "attempt('netlink', lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))",
        "reads_checkout": f"attempt('read an .env in the checkout', lambda: open({str(planted)!r}).read())\n"
                          f"attempt('read the test suite', lambda: open({str(ROOT / 'tests' / 'test_sandbox.py')!r}).read())\n"
                          f"attempt('read the pipeline', lambda: open({str(ROOT / 'pipeline' / '__init__.py')!r}).read())",
        "sysctl": "name = open('/proc/sys/kernel/hostname').read().strip()  # written back unchanged if it escapes\n"
                  "attempt('write /proc/sys', lambda: open('/proc/sys/kernel/hostname', 'w').write(name))",
        "db_hunter": f"for path in glob.glob({str(base / '**' / '*.db')!r}, recursive=True) + glob.glob('/root/.kforge/*.db'):\n"
                     "    attempt('truncate ' + path, lambda: open(path, 'w').close())\n"
                     "    attempt('rename ' + path, lambda: os.rename(path, path + '.gone'))\n"
                     "    attempt('delete rows ' + path, lambda: sqlite3.connect(path).execute('DELETE FROM evaluation').connection.commit())\n"
                     "    attempt('unlink ' + path, lambda: os.unlink(path))",
        "parent": f"attempt('signal kforge', lambda: os.kill({os.getpid()}, 0))\n"
                  f"attempt('see kforge in /proc', lambda: open('/proc/{os.getpid()}/status').read())\n"
                  "attempt('see the host processes', lambda: [][0] if len(glob.glob('/proc/[0-9]*')) < 20 else None)",
        "memory": "def scan(head, tail):  # every readable and writable mapping of this process, read whole\n"
                  "    with open('/proc/self/maps') as maps, open('/proc/self/mem', 'rb', 0) as mem:\n"
                  "        for line in maps:\n"
                  "            span, perms = line.split()[:2]\n"
                  "            start, end = (int(x, 16) for x in span.split('-'))\n"
                  "            try:\n"
                  "                mem.seek(start)\n"
                  "                data = mem.read(end - start) if perms.startswith('rw') else b''\n"
                  "            except OSError:\n"
                  "                continue\n"
                  "            at = data.find(head)\n"
                  "            while at >= 0:\n"
                  "                if data[at + len(head):at + len(head) + len(tail)] == tail:\n"
                  "                    return\n"
                  "                at = data.find(head, at + 1)\n"
                  "    raise LookupError\n"
                  "probe = os.urandom(8).hex().encode()\n"
                  "found_probe = [probe[:8] + b'-' + probe[8:]]  # made at run time: the scan must see it\n"
                  "try:\n"
                  "    scan(probe[:8] + b'-', probe[8:])\n"
                  "except LookupError:\n"
                  "    ESCAPED.append('the memory scan did not see the heap')\n"
                  f"attempt('find kforge\\'s secret in its own memory', lambda: scan({SECRET_HEAD.encode()!r}, {SECRET_TAIL.encode()!r}))",
        "capabilities": "write('mine')  # its own file in its scratch: chown-ing it away needs CAP_CHOWN\n"
                        "attempt('chown its own file', lambda: os.chown('mine', 12345, 12345))\n"
                        "held = lambda: int(next(l for l in open('/proc/self/status') if l.startswith('CapEff')).split()[1], 16)\n"
                        "attempt('hold a capability', lambda: [][0] if held() == 0 else None)\n"
                        "if ESCAPED:  # also in the compile child, whose import is all it runs\n"
                        "    raise RuntimeError(f'escaped: {sorted(set(ESCAPED))}')",
        "proc_opener": "for fd in glob.glob('/proc/*/fd/*'):\n"
                       "    try:\n"
                       "        os.close(os.open(fd, os.O_RDONLY | os.O_NONBLOCK))\n"
                       "    except OSError:\n"
                       "        pass",
    }
    paths = [_candidate(hostile, name, body) for name, body in bodies.items()]
    paths.append(ROOT / "tests" / "adversarial" / "relu" / "daemon.py")
    settings = EvalSettings(device="cpu", size="small", trials=2, warmup_ms=5, rep_ms=20, leak_calls=2, jobs=2, build_root=build_root)
    relu = resolve_problem("relu")
    started = time.monotonic()
    planted.write_text("OPENAI_API_KEY=sk-test")
    try:
        verdicts = {Path(v.solution_path).stem: v for v in evaluate([CandidateJob(path=p, problem=relu) for p in paths], settings)}
    finally:
        listeners.close()
        planted.unlink()
    return {"verdicts": verdicts, "db": db, "targets": targets, "listeners": listeners, "wall_s": time.monotonic() - started}


ATTACKS = ["writes", "reads_secret", "reads_checkout", "network", "sysctl", "db_hunter", "parent", "memory", "capabilities", "proc_opener",
           "daemon"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ATTACKS)
def test_every_attempt_is_refused_and_the_verdict_says_which_layers(world, name):
    """`correct` means no attempt succeeded (one that did makes forward() raise, naming it)."""
    v: Verdict = world["verdicts"][name]
    assert v.status is Status.CORRECT, v.evidence.cause
    assert v.evidence.sandbox.get("landlock", "").startswith("on") and v.evidence.sandbox.get("pid") == "on", v.evidence.sandbox


@pytest.mark.slow
def test_nothing_was_written_connected_erased_or_leftrunning(world):
    assert [t for t in world["targets"] if t.exists()] == []
    assert world["listeners"].accepted == 0
    with sqlite3.connect(world["db"]) as conn:
        assert conn.execute("SELECT count(*) FROM evaluation").fetchone() == (5,)
    assert running("kforge-adversarial-daemon") == []
    assert world["wall_s"] < 600  # the /proc opener did not block the batch


@pytest.mark.slow
def test_nothing_outlives_kforge_killed_mid_evaluation(tmp_path, adversarial_build_root):
    """kforge is SIGKILLed while the daemon's candidate runs: the jail's outer process gets its parent-death
    signal, the child is killed, and the kernel ends the whole namespace, daemon included."""
    run = kforge_runner(tmp_path, adversarial_build_root)
    slow = tmp_path / "relu" / "daemon_then_hang.py"
    slow.parent.mkdir()
    slow.write_text((ROOT / "tests" / "adversarial" / "relu" / "daemon.py").read_text().replace(
        "return ext.relu(x)", "while True:\n            pass"))
    proc = subprocess.Popen([sys.executable, "-m", "kforge", "submit", str(slow), "--problem", "relu", "--device", "cpu",
                             "--db", f"sqlite:///{tmp_path / 'k.db'}"], cwd=ROOT, env=run.env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while not running("kforge-adversarial-daemon") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert running("kforge-adversarial-daemon"), "the daemon never started"
    time.sleep(2)  # the candidate child now runs (its compile child and its daemon are gone already)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 15
    while running("kforge-adversarial-daemon") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert running("kforge-adversarial-daemon") == []
    assert running(str(slow)) == []


@pytest.mark.slow
def test_a_hang_is_a_timeout_within_two_minutes(cpu_settings):
    """No limit set by hand: the run budget follows from the reference's own time, so the default cap (15 min)
    never comes into play."""
    job = CandidateJob(path=ROOT / "tests" / "candidates" / "scale_bias_hardswish" / "py_timeout.py",
                       problem=resolve_problem("scale_bias_hardswish"))
    started = time.monotonic()
    (v,) = evaluate([job], cpu_settings)
    assert v.status is Status.TIMEOUT and time.monotonic() - started < 120, (v.status, time.monotonic() - started)
    assert running(str(job.path)) == []


def test_the_cuda_comparer_keeps_kforges_pid_namespace_but_not_its_powers(tmp_path):
    """The reference child on CUDA skips the namespaces (IPC handles must reach it) and still gets the rest."""
    import json

    from evaluator.parent.jail_spec import jail_spec
    from evaluator.sandbox.spawn import _JAIL, scrubbed_env

    spec = jail_spec([tmp_path], [], namespaces=False)
    code = "import json, os; print(json.dumps([os.getpid(), os.environ['KFORGE_JAIL']]))"
    proc = subprocess.run([sys.executable, str(_JAIL), json.dumps(spec), "--", sys.executable, "-c", code], cwd=tmp_path,
                          env=scrubbed_env(tmp_path, tmp_path, "t"), capture_output=True, text=True, timeout=60)
    pid, layers = json.loads(proc.stdout)
    layers = json.loads(layers)
    assert pid != 1 and layers["pid"].startswith("off: the comparer") and layers["landlock"].startswith("on")
    assert layers["caps"] == "on"


@pytest.mark.parametrize("namespaces", [True, False])
def test_a_jailed_child_names_its_threads_the_way_cuda_does_and_writes_nothing_else_in_proc(tmp_path, namespaces):
    """cuInit writes /proc/self/task/<tid>/comm ("wb") and fails with error 304 if it cannot (found on the H100);
    the rest of /proc (sysctls, other processes) stays read-only."""
    import json

    from evaluator.parent.jail_spec import jail_spec
    from evaluator.sandbox.spawn import _JAIL, scrubbed_env

    code = ("import os, threading\n"
            "open(f'/proc/self/task/{threading.get_native_id()}/comm', 'wb').write(b'kforge-cuda')\n"
            "print(open(f'/proc/self/task/{threading.get_native_id()}/comm').read().strip())\n"
            "try:\n"
            "    open('/proc/sys/kernel/hostname', 'w')\n"
            "    print('sysctl writable')\n"
            "except OSError as exc:\n"
            "    print('sysctl', exc.errno)\n")
    spec = jail_spec([tmp_path], [], namespaces=namespaces)
    proc = subprocess.run([sys.executable, str(_JAIL), json.dumps(spec), "--", sys.executable, "-c", code], cwd=tmp_path,
                          env=scrubbed_env(tmp_path, tmp_path, "t"), capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["kforge-cuda", "sysctl", "13"], proc.stdout + proc.stderr


@pytest.mark.skipif(os.geteuid() != 0 and not REQUIRE_SANDBOX, reason="the drop to another uid is what a root kforge does")
def test_as_root_the_child_becomes_nobody_and_a_root_only_file_stays_closed_where_the_rules_allow_reading():
    """The jail's identity layer on its own (the child here is /bin/sh, reachable by uid 65534 on any machine):
    the writable dir is handed over, a root-owned 0600 file in a readable dir stays unreadable."""
    import json

    if os.geteuid() != 0:
        pytest.fail("KFORGE_REQUIRE_SANDBOX is set: this test needs root (CI runs as root)", pytrace=False)
    import shutil
    import tempfile

    from evaluator.parent.jail_spec import child_identity, jail_spec
    from evaluator.sandbox.spawn import _JAIL

    tmp_path = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's own tmp folders are 0700: no other uid gets in
    tmp_path.chmod(0o711)
    scratch, secret = tmp_path / "scratch", tmp_path / "shelf" / "secret"
    scratch.mkdir()
    secret.parent.mkdir(mode=0o755)
    secret.write_text("root only")
    secret.chmod(0o600)
    spec = jail_spec([scratch], [secret.parent])
    spec["read"] = [p for p in spec["read"] if not p.startswith("/root")]  # /bin/sh needs no Python
    spec["identity"] = child_identity(spec["read"], spec["write"])
    script = f"id -u; echo x > {scratch}/made && echo wrote; cat {secret} 2>/dev/null || echo closed"
    try:
        proc = subprocess.run([sys.executable, str(_JAIL), json.dumps(spec), "--", "/bin/sh", "-c", script],
                              cwd=scratch, env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60)
        assert proc.stdout.split() == ["65534", "wrote", "closed"], proc.stdout + proc.stderr
        assert (scratch / "made").stat().st_uid == 65534
    finally:
        shutil.rmtree(tmp_path)


# its own build, without a precompiled header (an -I flag makes it ineligible): one plain compile
VICTIM = COMPILED_RELU.replace("kforge_survival_relu", "kforge_cache_victim").replace('extra_cflags=["-O3"]', 'extra_cflags=["-I."]')

CACHE_ATTACKER = '''
import glob, os, threading
import torch.nn as nn

ROOT, VICTIM = {root!r}, {victim!r}
ESCAPED = []


def attempt(name, action):
    try:
        action()
        ESCAPED.append(name)
    except Exception:
        pass


def append(path, data=b"poison"):
    with open(path, "ab") as fh:
        fh.write(data)


def attack():
    attempt("write the cache root", lambda: append(ROOT + "/planted"))
    attempt("make a build dir", lambda: os.mkdir(ROOT + "/planted-key"))
    attempt("write the outcomes", lambda: append(ROOT + "/outcomes/planted.built"))
    attempt("write another key's build dir", lambda: append(VICTIM + "/planted"))
    for so in glob.glob(VICTIM + "/**/*.so", recursive=True) + glob.glob(ROOT + "/pch/**/*.so", recursive=True):
        attempt("poison " + so, lambda: append(so))
        attempt("replace " + so, lambda: os.rename(so, so + ".planted"))
    attempt("write pch/", lambda: append(ROOT + "/pch/planted"))
    for gch in glob.glob(ROOT + "/pch/*/torch/extension.h*"):
        attempt("poison " + gch, lambda: append(gch))
    attempt("move another key's build away", lambda: os.rename(VICTIM, VICTIM + "-planted"))


attack()  # before the build
stop = threading.Event()
threading.Thread(target=lambda: [attack() for _ in iter(stop.is_set, True)], daemon=True).start()  # while it builds
from tests.adversarial.tiny_ext import ext
stop.set()
attack()


class ModelNew(nn.Module):
    def forward(self, x):
        if not hasattr(self, "done"):
            self.done = attack() or True
        if ESCAPED:
            raise RuntimeError(f"escaped: {{sorted(set(ESCAPED))}}")
        return ext.relu(x)
'''


def _digests(root: Path) -> dict[str, str]:
    import hashlib

    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


@pytest.mark.slow
def test_a_compile_stage_candidate_cannot_write_the_build_cache(adversarial_build_root, tmp_path):
    """The cache is written by the parent only: a candidate attacking it while it compiles (before, during and after
    its load_inline) and while it runs, finds the cache root, another key's published build, the outcomes and
    pch/ (the shared .so, the precompiled headers) all refused; every file there is unchanged from outside, and
    the victim, evaluated again, loads its build as it was."""
    from evaluator.parent.batch import build_key

    root, relu = adversarial_build_root, resolve_problem("relu")
    settings = EvalSettings(device="cpu", size="small", trials=2, warmup_ms=5, rep_ms=20, leak_calls=2, jobs=2, build_root=root)
    victim = tmp_path / "victim.py"
    victim.write_text(VICTIM)
    (first,) = evaluate([CandidateJob(path=victim, problem=relu)], settings)
    assert first.status is Status.CORRECT, first.evidence.cause
    victim_dir = root / build_key(VICTIM, "cpu")
    assert any(victim_dir.rglob("*.so")) and victim_dir.stat().st_uid == os.geteuid()  # published by the parent
    gch = root / "pch" / "victim-variant" / "torch" / "extension.h.gch"  # as the parent publishes one
    gch.parent.mkdir(parents=True, exist_ok=True)
    gch.write_bytes(b"a precompiled header")
    before = _digests(root)

    attacker = tmp_path / "cache_attacker.py"
    attacker.write_text(CACHE_ATTACKER.format(root=str(root), victim=str(victim_dir)))
    (v,) = evaluate([CandidateJob(path=attacker, problem=relu)], settings)
    assert v.status is Status.CORRECT, v.evidence.cause  # a refused attempt leaves it correct
    assert v.evidence.sandbox.get("cache", "").startswith("on"), v.evidence.sandbox
    after = _digests(root)
    assert {p: d for p, d in after.items() if p in before} == before
    assert [p for p in map(str, root.rglob("*")) if "planted" in p] == []

    (again,) = evaluate([CandidateJob(path=victim, problem=relu)], settings)
    assert again.status is Status.CORRECT and again.evidence.cache_hit, again.evidence.cause


FORK_BOMB = '''"""Forks until the kernel refuses (at most 400: bounded even where no limit holds), then says how many it got."""
import os
import torch.nn as nn
from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def forward(self, x):
        got = 0
        while got < 400:
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                os.execvp("sh", ["sh", "-c", "while :; do sleep 1; done", "kforge-fork-bomb"])
            got += 1
        raise RuntimeError(f"forked {got} processes before the kernel refused")
'''

MEMORY_HOG = '''"""Three processes each filling 1.2 GB: each stays under its own address-space limit, together they pass the
child's memory limit (3 GB), which only a limit on the whole child (its cgroup) sees."""
import os
import time
import torch.nn as nn
from tests.adversarial.tiny_ext import ext


class ModelNew(nn.Module):
    def forward(self, x):
        hogs = []
        for _ in range(3):
            pid = os.fork()
            if pid == 0:
                kept = [b"\\1" * (100 << 20) for _ in range(12)]
                time.sleep(2)
                os._exit(len(kept))
            hogs.append(pid)
        ended = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in hogs]
        raise RuntimeError(f"the hogs ended with {ended}")
'''


@pytest.fixture(scope="module")
def hungry(adversarial_build_root, tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("hungry")
    (base / "fork_bomb.py").write_text(FORK_BOMB)
    (base / "memory_hog.py").write_text(MEMORY_HOG)
    limits = Limits(timeout_s=120, processes=128, memory_mb=3072)
    settings = EvalSettings(device="cpu", size="small", trials=2, warmup_ms=5, rep_ms=20, leak_calls=2, jobs=2,
                            build_root=adversarial_build_root, limits=limits)
    relu = resolve_problem("relu")
    started = time.monotonic()
    verdicts = {Path(v.solution_path).stem: v for v in evaluate(
        [CandidateJob(path=base / f"{name}.py", problem=relu) for name in ("fork_bomb", "memory_hog")], settings)}
    return {"verdicts": verdicts, "wall_s": time.monotonic() - started}


@pytest.mark.slow
def test_a_fork_bomb_is_refused_by_the_childs_process_limit_and_leaves_nothing(hungry):
    v = hungry["verdicts"]["fork_bomb"]
    assert v.evidence.sandbox.get("resources", "").startswith("on"), v.evidence.sandbox
    got = int(re.search(r"forked (\d+) processes", v.evidence.cause).group(1))
    assert v.status is Status.RUNTIME_ERROR and 0 < got < 128, v.evidence.cause
    assert running("kforge-fork-bomb") == [] and hungry["wall_s"] < 300


@pytest.mark.slow
def test_a_memory_hog_spread_over_processes_is_stopped_by_the_childs_memory_limit(hungry):
    v = hungry["verdicts"]["memory_hog"]
    assert v.status is Status.RUNTIME_ERROR and "memory limit" in v.evidence.cause, v.evidence.cause
    assert running(str(v.solution_path)) == []


def test_a_childs_exit_is_seen_as_it_happens_and_a_running_child_is_waited_for_no_longer_than_asked():
    """The parent's wait on a child (evaluator.sandbox.spawn._wait_exit) wakes as the child ends, long before its
    timeout, and returns at the timeout while the child still runs (the budget checks come between waits)."""
    from evaluator.sandbox.spawn import _wait_exit

    ending = subprocess.Popen([sys.executable, "-S", "-c", "import time; time.sleep(0.3)"])
    start = time.monotonic()
    _wait_exit(ending, 30.0)
    assert ending.poll() == 0 and time.monotonic() - start < 10.0
    running_child = subprocess.Popen([sys.executable, "-S", "-c", "import time; time.sleep(60)"])
    try:
        start = time.monotonic()
        _wait_exit(running_child, 0.5)
        assert 0.45 < time.monotonic() - start < 5.0 and running_child.poll() is None
    finally:
        running_child.kill()
        running_child.wait()
