"""What a jailed child may read and write and who it runs as (the spec evaluator/sandbox/jail.py builds its walls from),
and which of the jail's layers this machine gives (probed with a real jailed child)."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from evaluator.sandbox import cgroups, disk
from evaluator.contracts import EvaluatorError, Limits
from evaluator.sandbox.spawn import ROOT, jailed, scrubbed_env

_log = logging.getLogger(__name__)
# What every jailed child may read besides its own files: the system's programs and libraries, Python and its
# packages, kforge's code, and the few files under /etc that the loader, compilers and Python look at.
_SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/opt", "/proc", "/sys", "/etc/ld.so.cache",
                "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime", "/etc/passwd",
                "/etc/group", "/etc/nsswitch.conf", "/run/nvidia-persistenced")
# Of kforge's checkout, what children import; the rest (where a user may keep an .env, a db, other candidates)
# they may list, not read.
_CODE = ("evaluator", "reference_problems")
# More folders or files every child may read (os.pathsep between them): modules candidates import from outside
# their own file, e.g. a helper shared by several.
EXTRA_READ_VAR = "KFORGE_CHILD_READ"
_NOBODY = 65534


def jail_spec(writable: list[Path], readable: list[Path], namespaces: bool = True, view: dict | None = None) -> dict:
    """The jail's file rules for one child: write only `writable` (its scratch) and, through the `view` of the
    build cache (evaluator/parent/buildcache.py), its own build dir; read the system, Python, kforge's code,
    `readable` (its problem and candidate files, the shared precompiled headers) and what EXTRA_READ_VAR names;
    list the rest of the checkout. Without `namespaces` it keeps kforge's PID namespace (the trusted comparer on
    CUDA)."""
    cuda = [os.environ[k] for k in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(k)]
    extra = [p for p in os.environ.get(EXTRA_READ_VAR, "").split(os.pathsep) if p]
    read = {*_SYSTEM_READ, *_python(), *cuda, *map(str, readable), *(str(ROOT / p) for p in _CODE), *extra}
    read = sorted(read - {os.getcwd()})  # sys.path may name the cwd
    write = [str(p) for p in writable]
    return {"read": read, "write": write, "list": ["/dev", str(ROOT)], "namespaces": namespaces,
            "view": view, "identity": child_identity(read, write + ([view["own"]] if view else []))}


def _python() -> set[str]:
    """Python and its packages: its prefixes (a virtualenv inside the checkout included) and sys.path, less the
    entries inside the checkout that are not under a prefix (its root on PYTHONPATH, tests/ under pytest)."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    paths = {p for p in sys.path if p and Path(p).is_dir()}
    return prefixes | {p for p in paths if not _inside(p, ROOT) or any(_inside(p, prefix) for prefix in prefixes)}


def _inside(path: str, folder: Path | str) -> bool:
    return Path(path).resolve().is_relative_to(Path(folder).resolve())


_PROBE = ("import json, os, runpy; f = runpy.run_path(os.environ['KFORGE_CONFINE'])['forbid_touching_parent']; "
          "layers = json.loads(os.environ.get('KFORGE_JAIL', '{}')); "
          "layers['seccomp'] = 'on' if f() else 'off: not x86-64, or not permitted'; print(json.dumps(layers))")


def probe_layers(scratch: Path) -> dict[str, str]:
    """Which sandbox layers a jailed child gets on this machine: each 'on', or 'off: why'. It runs as a candidate
    child does, in a disk of its own (evaluator/sandbox/disk.py) inside `scratch`, which must be traversable by the
    child uid (a batch's root is)."""
    own = Path(tempfile.mkdtemp(prefix="probe-", dir=scratch))  # probes of several batches may share `scratch`
    own.chmod(0o711)
    try:
        return _probe(own, disk.mount(own))
    finally:
        disk.release(own)


def _probe(own: Path, in_disk: dict) -> dict[str, str]:
    from evaluator.parent import buildcache  # torch comes with it: only where a probe runs

    scratch = own / "run"
    scratch.mkdir()
    view = buildcache.view(own.parent / "probe-builds", own.parent / "probe-builds" / "key", scratch)
    spec = jail_spec([scratch], [], view=view) | {"disk": in_disk}
    limits = Limits()
    group, said = cgroups.for_child(limits.processes, limits.memory_mb)
    cmd = jailed(spec, [sys.executable, "-c", _PROBE], group, said)
    try:
        env = scrubbed_env(scratch, scratch, "probe") | {"KFORGE_CONFINE": str(ROOT / "evaluator" / "sandbox" / "seccomp.py")}
        proc = subprocess.run(cmd, cwd=scratch, env=env, capture_output=True, text=True, timeout=60)
        layers = json.loads(proc.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, OSError, ValueError, IndexError) as exc:
        return {"jail": f"off: the jail did not start ({type(exc).__name__})"}
    finally:
        if group:
            group.close()
    return layers


def require_layers(scratch: Path, mode: str) -> dict[str, str]:
    """The layers a jailed child gets here (probe_layers). In strict mode a missing kernel-enforced layer is an
    EvaluatorError, before any child runs; the uid layer is reported, not required (see child_identity)."""
    layers = probe_layers(scratch)
    missing = {k: v for k, v in layers.items() if k != "identity" and not v.startswith("on")}
    if missing and mode == "strict":
        raise EvaluatorError("sandbox layer(s) missing: " + "; ".join(f"{k} {v}" for k, v in missing.items())
                             + " (KFORGE_SANDBOX=warn runs anyway and records it in every verdict)")
    if missing:
        _log.warning("running with sandbox layers missing: %s", missing)
    return layers


def child_identity(read: list[str], write: list[str]) -> dict:
    """Who the child runs as. Not root: kforge's own uid. Root: nobody (65534), if that uid can reach everything
    the child must read (and the dirs it writes, which the jail hands to it); otherwise root without capabilities
    (evaluator.sandbox.jail._become), and the reason is said (on the CPU machines Python lives under /root, mode 700)."""
    if os.geteuid() != 0:
        return {"said": f"on (uid {os.geteuid()}, kforge's own)"}
    need = {p: stat.S_IROTH | (stat.S_IXOTH if os.path.isdir(p) else 0) for p in read if os.path.exists(p)}
    need |= {os.path.dirname(p): stat.S_IXOTH for p in write}  # handed over by the jail: only the way there
    blocked = next((p for p, bits in need.items() if not _reachable(p, bits)), None)
    if blocked:
        return {"said": f"off: uid {_NOBODY} cannot reach {blocked}; the child is root without capabilities"}
    return {"uid": _NOBODY, "gid": _NOBODY}


def _reachable(path: str, bits: int) -> bool:
    """Whether a uid that is neither owner nor in the group could get to `path` by the permission bits: every
    dir above it searchable by others, and the path itself allowing them `bits`."""
    path = os.path.realpath(path)
    try:
        return os.stat(path).st_mode & bits == bits and all(os.stat(p).st_mode & stat.S_IXOTH for p in Path(path).parents)
    except OSError:
        return False
