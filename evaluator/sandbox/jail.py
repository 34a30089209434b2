"""The jail every evaluator child runs in: `python evaluator/sandbox/jail.py SPEC_JSON -- CMD...` (run as a file, so that
starting it imports neither torch nor the evaluator package).

Layers, each enforced by the kernel and each reported (a missing one is named, never silently skipped):
- pid: a new PID namespace whose init is the evaluator child itself. When it ends, the kernel kills every process
  the candidate made (double-forked, setsid'd, parent-death signal cleared), and kforge's processes have no pid
  inside it to signal, trace or open under /proc.
- proc: a private mount namespace with its own /proc, which lists only the jail's processes.
- caps: the capability bounding set emptied and no new privileges: root inside has no capability after exec.
- landlock: reads only where Python, torch, compilers and CUDA live plus the child's own files; writes only its
  scratch and build dirs (and a few device files); no TCP bind/connect; no abstract unix socket or signal
  outside the jail.
- cache: the build cache is seen through a private overlay whose lower layer is the cache and whose upper layer is
  a folder of the child's own: the child writes only its own build dir in it, and nothing it writes reaches the cache.
  The trusted parent publishes a compile child's upper layer after it ended well; a candidate child's is removed
  with its disk. Precompiled headers (pch/) are read-only.
- disk: everything the child may write (its scratch, its view's upper layer) lies in its candidate's disk, a tmpfs
  of the disk quota that kforge mounted (evaluator/sandbox/disk.py): checked here, in the child's own namespace.
- identity: when kforge runs as root and everything the child reads is reachable by another uid, the child runs
  as that uid (nobody, 65534): root-owned files stay closed even where a path rule were missed. Its writable
  dirs are handed to that uid first.
- resources: before anything else the jail joins the child's cgroup(s) (made by evaluator/sandbox/cgroups.py with a
  process count and a memory limit), so everything the child starts is counted in them.
- network (the profile variant only, spec key `profile`: Nsight Compute and its target talk over TCP on loopback
  and pass data through /dev/shm): a network namespace of its own with only its loopback up, a private tmpfs on
  /dev/shm, and Landlock then allows TCP (the namespace is the wall: nothing but that loopback is reachable). If the
  namespace or the tmpfs cannot be made, nothing is relaxed and nothing runs: the jail says why and exits 126.
The outer process (this module's parent half) waits for the child, passes SIGINT/SIGTERM on, and dies with kforge
(parent-death signal); the child gets SIGKILL when it dies, so nothing outlives kforge.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from typing import Callable

import landlockpy
from landlockpy import AccessFS, AccessNet, Scope

_CLONE_NEWNS, _CLONE_NEWPID, _CLONE_NEWUSER, _CLONE_NEWNET = 0x00020000, 0x20000000, 0x10000000, 0x40000000
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_SHM_SIZE = "2g"  # the profile's /dev/shm: ncu's buffers, counted in the child's memory cgroup
_PROFILE_SPEC = "KFORGE_PROFILE_SPEC"  # the profile jail's rules, for the target's own layer
NO_PROFILE_JAIL = 126  # the profile variant could not build its walls: nothing ran
_MS_REC, _MS_PRIVATE, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x4000, 1 << 18, 2, 4, 8
_PR_SET_PDEATHSIG, _PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 1, 24, 38, 47, 4
_LAST_CAP = 63
_CAPABILITY_VERSION_3 = 0x20080522  # capset's header: two 32-bit words per set

_READ = AccessFS.READ_FILE | AccessFS.READ_DIR | AccessFS.EXECUTE
_WRITE = _READ | AccessFS.WRITE_FILE | AccessFS.REMOVE_DIR | AccessFS.REMOVE_FILE | AccessFS.MAKE_DIR | \
    AccessFS.MAKE_REG | AccessFS.MAKE_SYM | AccessFS.MAKE_FIFO | AccessFS.MAKE_SOCK | AccessFS.REFER | AccessFS.TRUNCATE
_DEVICE_RW = AccessFS.READ_FILE | AccessFS.WRITE_FILE | AccessFS.IOCTL_DEV | AccessFS.TRUNCATE
# Its own /proc/<pid> (threads included): the CUDA driver names its threads through /proc/self/task/*/comm,
# opened "wb" (so truncate too), and cuInit fails (error 304) when it cannot. Nothing else under /proc is
# writable: /proc/sys and /proc/sysrq-trigger are root's files, open to a root without capabilities.
_OWN_PROC = AccessFS.READ_FILE | AccessFS.READ_DIR | AccessFS.WRITE_FILE | AccessFS.TRUNCATE
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount_proc() -> None:
    """Our mounts stop propagating to the host, then a /proc of this PID namespace replaces the host's view."""
    libc = _libc()
    _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "make / private")
    _check(libc.mount(b"proc", b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None), "mount /proc")


def _mount(source: str, target: str, fstype: str, options: str) -> None:
    _check(_libc().mount(source.encode(), target.encode(), fstype.encode(), _MS_NOSUID | _MS_NODEV,
                         options.encode()), f"mount {fstype} on {target}")


def _cache_view(spec: dict) -> str:
    """The build cache as this child sees it: an overlay whose lower layer is the cache and whose upper layer is
    the view folder (in the child's disk, where the parent publishes a compile child's build from), so nothing the
    child writes under the cache root reaches the cache. Its own build dir is made in the view."""
    view = spec["view"]
    upper, work = os.path.join(view["dir"], "upper"), os.path.join(view["dir"], "work")
    if any(c in p for p in (view["root"], view["dir"]) for c in ",:\\ \n"):
        raise OSError(0, "a path of the cache or the view holds a character overlay options cannot carry")
    os.makedirs(upper, exist_ok=True)
    os.makedirs(work, exist_ok=True)
    userxattr = ",userxattr" if spec.get("user_namespace") else ""
    _mount("overlay", view["root"], "overlay", f"lowerdir={view['root']},upperdir={upper},workdir={work}{userxattr}")
    return "on (private overlay; the parent publishes)"


def _own_build_dir(spec: dict, why_not: str = "") -> str:
    """Mount the cache view, unless there is no private mount namespace to mount it in (`why_not`), or say why it
    failed: the child then writes its own build dir in the cache itself. Then make the child's build dir and
    hand it to the child uid."""
    view = spec.get("view")
    if view is None:
        return "on (no build cache in this child)"
    try:
        if why_not:
            raise OSError(0, why_not)
        said = _cache_view(spec)
    except OSError as exc:
        said = f"off: {exc.strerror}; the child writes its own build dir in the cache"
    os.makedirs(view["own"], exist_ok=True)
    if "uid" in spec["identity"]:
        _chown_tree(view["own"], spec["identity"])
    return said


def _disk(spec: dict) -> str:
    """The disk layer: what kforge said of the child's disk, once each dir the child may write (its scratch, its
    view's upper layer) is seen in this namespace to lie in it, and it is no larger than the quota."""
    disk = spec.get("disk") or {"said": "off: no disk of its own (a trusted child): its files are watched from outside"}
    if "dir" not in disk:
        return disk["said"]
    own, fs = os.stat(disk["dir"]).st_dev, os.statvfs(disk["dir"])
    writes = [*spec["write"], *([spec["view"]["dir"]] if spec.get("view") else [])]
    outside = [p for p in writes if os.stat(p).st_dev != own]
    if outside or fs.f_blocks * fs.f_frsize > disk["bytes"] or fs.f_files > disk["entries"]:
        return f"off: {(outside or [disk['dir']])[0]} is not in a tmpfs of the disk quota"
    return disk["said"]


def _drop_capabilities() -> None:
    libc = _libc()
    for cap in range(_LAST_CAP + 1):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the kernel's last capability: fine
    _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def _hand_over(spec: dict) -> None:
    """Root's half: the child's writable dirs (and what earlier children left in them) become the child uid's."""
    for top in spec["write"]:
        _chown_tree(top, spec["identity"])


def _chown_tree(top: str, user: dict) -> None:
    for path in [top, *(os.path.join(d, n) for d, dirs, files in os.walk(top) for n in dirs + files)]:
        os.lchown(path, user["uid"], user["gid"])


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapSets(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _become(spec: dict) -> str:
    """Drop to the child uid (after the walls that need root are built), then hold no capability at all: the
    emptied bounding set takes them only at an exec, and a child forked from the fork server never execs. A
    root child kept every one (CAP_SYS_MODULE, CAP_SYS_BOOT, CAP_SYS_NICE...) before the sets were emptied here."""
    user = spec["identity"]
    said = user.get("said", "")
    if "uid" in user:
        os.setgroups([])
        os.setgid(user["gid"])
        os.setuid(user["uid"])
        said = f"on (uid {user['uid']})"
    libc = _libc()
    _check(libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clearing the ambient capabilities")
    _check(libc.capset(ctypes.byref(_CapHeader(_CAPABILITY_VERSION_3, 0)), ctypes.byref((_CapSets * 2)())), "capset")
    return said


def _landlock(spec: dict) -> str:
    """Apply the file and network rules; the ABI it ran with, or why not."""
    abi = landlockpy.abi_version()
    if abi < 1:
        return "off: the kernel has no Landlock"
    profile = spec.get("profile", False)  # TCP in its own network namespace (only loopback there)
    with landlockpy.Ruleset(handled_net=AccessNet.NONE if profile else AccessNet.BIND_TCP | AccessNet.CONNECT_TCP,
                            scoped=Scope.ABSTRACT_UNIX_SOCKET | Scope.SIGNAL) as rules:
        for path in spec["read"]:
            if os.path.exists(path):
                rules.allow_path(path, _READ if os.path.isdir(path) else _READ & ~AccessFS.READ_DIR)
        for path in spec.get("list", []):  # names only (/dev: its files are raw disks, memory, other users' shm)
            rules.allow_path(path, AccessFS.READ_DIR)
        for path in [*spec["write"], *([spec["view"]["own"]] if spec.get("view") else []), *(["/dev/shm"] if profile else [])]:
            rules.allow_path(path, _WRITE)
        # its own /proc/<pid>; in the profile variant's outer layer every process's of the jail (its own /proc):
        # there ncu starts the target, whose pid is not known here, and the target narrows it (narrow_profile_target)
        rules.allow_path("/proc" if spec.get("whole_proc") else os.path.realpath("/proc/self"), _OWN_PROC)
        for path in [*_DEVICES, *(os.path.join("/dev", n) for n in _list("/dev") if n.startswith("nvidia"))]:
            if os.path.exists(path) and not os.path.isdir(path):
                rules.allow_path(path, _DEVICE_RW)
        rules.restrict()
    return f"on (ABI {abi}; TCP allowed: its own network namespace has only loopback)" if profile else f"on (ABI {abi})"


def _list(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _inside(spec: dict, run: Callable[[], None]) -> None:
    """PID 1 of the new namespace: build the walls, then become the evaluator child (`run`)."""
    layers = {}
    _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    try:
        _mount_proc()
        layers["proc"] = "on"
    except OSError as exc:
        layers["proc"] = f"off: {exc}"
    layers["cache"] = _own_build_dir(spec, why_not="" if layers["proc"] == "on" else "no private mounts")
    layers["disk"] = _disk(spec)
    if spec.get("profile"):
        layers |= _profile_walls(spec, layers["proc"])
        os.environ[_PROFILE_SPEC] = json.dumps(spec)
    _drop_capabilities()
    layers["caps"] = "on"
    layers["landlock"] = _landlock(spec | {"whole_proc": bool(spec.get("profile"))})
    layers["identity"] = _become(spec)
    os.environ["KFORGE_JAIL"] = json.dumps(layers | {"pid": "on", "resources": spec["resources"]})
    run()


def narrow_profile_target() -> str:
    """Called by the profile child before it loads the candidate: a second Landlock layer (layers stack: both
    apply) with the same rules but /proc writable only for its own pid, as in any other child. The CUDA driver
    names its threads through /proc/self/task/*/comm and fails cuInit (error 304) where it cannot, and the jail's
    own layer could not name the pid ncu gives the target; this one keeps the candidate off ncu's /proc."""
    return _landlock(json.loads(os.environ.pop(_PROFILE_SPEC)))


def _profile_walls(spec: dict, proc: str) -> dict[str, str]:
    """The profile variant's own walls, built while this process still has its capabilities: loopback up in the
    network namespace main() made, and a private tmpfs on /dev/shm (Landlock then lets the child write it; what it
    writes never reaches the host's /dev/shm and dies with the namespace). Raises when either cannot be made, so
    the child does not start with TCP or /dev/shm opened to it."""
    if proc != "on":
        raise OSError(0, f"no private mount namespace for /dev/shm ({proc})")
    hidden = [p for p in [*spec["write"], *spec["read"]] if os.path.realpath(p).startswith("/dev/shm/")]
    if hidden:  # the private tmpfs would hide them: the child would start without its own folder
        raise OSError(0, f"{hidden[0]} lies under /dev/shm, which the profile jail replaces with a tmpfs of its own")
    _loopback_up()
    _mount("tmpfs", "/dev/shm", "tmpfs", f"size={_SHM_SIZE},mode=1777")
    return {"network": "on (own namespace, loopback only: ncu talks to its target over it)",
            "shm": "on (a private tmpfs: ncu passes its data through /dev/shm)"}


def _loopback_up() -> None:
    """ip link set lo up: a fresh network namespace has its loopback down."""
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = struct.unpack("16sH", fcntl.ioctl(sock, _SIOCGIFFLAGS, struct.pack("16sH22x", b"lo", 0))[:18])[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | _IFF_UP))


def _no_profile(why: str) -> None:
    """The profile variant without its namespace: relax nothing, run nothing (the parent reads why in the log)."""
    print(f"kforge jail: no profile jail here: {why}; nothing was relaxed and nothing ran", file=sys.stderr, flush=True)
    os._exit(NO_PROFILE_JAIL)


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _forward(pid: int):
    """SIGINT/SIGTERM go on to the child; if it has not ended 3 s later (it may ignore them, and kforge may be
    dead: this process also gets SIGINT as its parent-death signal) it is killed, and the namespace with it."""
    def handler(signum, _frame):
        _signal(pid, signum)
        signal.alarm(3)
    return handler


def _run_here(spec: dict, run: Callable[[], None], why: str) -> None:
    """Without namespaces (the CUDA comparer, or a kernel that refuses them): the other walls, then the child."""
    layers = {"pid": why, "proc": why, "cache": _own_build_dir(spec, why_not=why.removeprefix("off: "))}
    layers["disk"] = _disk(spec)
    _drop_capabilities()
    layers |= {"caps": "on", "landlock": _landlock(spec), "resources": spec["resources"]}
    os.environ["KFORGE_JAIL"] = json.dumps(layers | {"identity": _become(spec)})
    run()


def _own_user_namespace() -> None:
    """Without root, a user namespace (mapping only our own uid and gid) is what lets us make the PID and mount
    namespaces; inside it we keep our uid, and gain no power over anything outside."""
    uid, gid = os.geteuid(), os.getegid()
    if _libc().unshare(_CLONE_NEWUSER) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER)")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as fh:
            fh.write(text)


def _join_cgroups(spec: dict) -> str:
    """This process (and so all it starts) into the child's cgroups: what the resources layer says."""
    group = spec.get("cgroup") or {"procs": [], "said": "off: no cgroup was made for this child"}
    try:
        for procs in group["procs"]:
            with open(procs, "w") as fh:
                fh.write("0")
    except OSError as exc:
        return f"off: could not join the child's cgroup: {exc}"
    return group["said"]


def enter(spec: dict, run: Callable[[], None]) -> None:
    """Build the jail around this process and `run` the child in it (`run` never returns: it execs the child, or
    is the child when forked by evaluator/sandbox/forkserver.py). This process stays outside as the child's waiter."""
    spec["resources"] = _join_cgroups(spec)
    libc = _libc()
    if "uid" in spec["identity"]:
        _hand_over(spec)
    profile = bool(spec.get("profile"))
    if not spec.get("namespaces", True):  # the CUDA comparer: legacy IPC handles do not cross PID namespaces
        if profile:
            _no_profile("the spec asks for no namespaces")
        _run_here(spec, run, "off: the comparer stays in kforge's namespaces (CUDA IPC handles do not cross PID "
                             "namespaces; on CPU it reads candidates' disks mounted after it started)")
    if os.geteuid() != 0:
        try:
            _own_user_namespace()
            spec["user_namespace"] = True  # an overlay mounted in it keeps its own attributes in user.* xattrs
        except OSError:
            pass  # the unshare below fails and says so
    if libc.unshare(_CLONE_NEWPID | _CLONE_NEWNS | (_CLONE_NEWNET if profile else 0)) != 0:
        why = os.strerror(ctypes.get_errno())
        if profile:
            _no_profile(f"unshare of the PID, mount and network namespaces failed: {why}")
        _run_here(spec, run, f"off: {why}")
    child = os.fork()
    if child == 0:
        try:
            _inside(spec, run)
        except BaseException as exc:  # noqa: BLE001 - said in the child's log, which kforge shows as evidence
            print(f"kforge jail: could not start the child: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        os._exit(127)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _forward(child))
    signal.signal(signal.SIGALRM, lambda _signum, _frame: _signal(child, signal.SIGKILL))
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            os._exit(1)
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # die the same way, so the parent sees the signal
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


def main() -> None:
    cmd = sys.argv[3:]
    enter(json.loads(sys.argv[1]), lambda: os.execvpe(cmd[0], cmd, os.environ))


if __name__ == "__main__":
    main()
