"""A seccomp filter for evaluator children: candidate code must not signal, trace or read the kforge parent,
and reaches no one over a socket.

Sockets: only unix ones can be made (the CUDA driver makes one at cuInit and fails without it), and none can
connect or send to an address: a unix socket is good only for talking to itself (socketpair) or accepting on
its own scratch path. So no network of any family, no host service (docker, tmux, systemd) through its socket.

Children run as the same user as kforge, so without this a candidate could simply `os.kill(os.getppid(), 9)`
(or ptrace it and rewrite the verdict). The filter is inherited by everything the child starts (compilers,
shells). A forbidden call kills the child with SIGSYS, which the parent reports as `cheat`.
Only x86-64 has the syscall table below; elsewhere the child runs unconfined (and says so).

The profile variant (`network=True`, only for the `profile` child, whose jail made it a network namespace of its
own: evaluator/sandbox/jail.py) also lets it make IPv4/IPv6 sockets, connect and send: Nsight Compute's injection in the
child talks to ncu over TCP on loopback. The namespace is the wall there; every other rule stays.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

# x86-64 syscall numbers
_ALWAYS = {"ptrace": 101, "tkill": 200, "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_send_signal": 424}
_BY_PID = {"kill": 62, "rt_sigqueueinfo": 129, "tgkill": 234, "rt_tgsigqueueinfo": 297, "pidfd_open": 434}
_SOCKET, _CONNECT, _SENDTO = 41, 42, 44
# sendmsg/sendmmsg may carry an address where the filter cannot read it; io_uring could make and connect sockets
# behind the filter's back. sched_setaffinity: on CPU a candidate is timed on the core its reference is timed on
# (batch.cpu_cores) and may not move to a quieter one. The priority calls: a compile runs below the children that
# hold a GPU (batch.COMPILE_NICE) and no child may raise itself above them, nor take a real-time class.
_REFUSED = {"sendmsg": 46, "sendmmsg": 307, "io_uring_setup": 425, "sched_setaffinity": 203, "setpriority": 141,
            "sched_setparam": 142, "sched_setscheduler": 144, "sched_setattr": 314}
_AF_UNIX, _AF_INET, _AF_INET6 = 1, 2, 10
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_BIT = 0x40000000

_LD_ABS, _JEQ, _JGE, _RET = 0x20, 0x15, 0x35, 0x06
_ALLOW, _KILL_PROCESS, _ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_EACCES, _ENOENT = 13, 2
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)


def _sockets(network: bool = False) -> list[bytes]:
    """After the syscall number is loaded: socket() of a family other than unix -> EACCES; connect() -> ENOENT
    (what finding no socket there says; the CUDA driver asks for an MPS daemon this way and goes on without
    one); sendto() with an address (both halves of the pointer checked), sendmsg, sendmmsg, io_uring_setup and
    sched_setaffinity and the priority calls -> EACCES. With `network`: unix, IPv4 and IPv6 sockets, connect, sendto and
    sendmsg/sendmmsg are allowed; io_uring_setup is still refused (the profile child runs on a GPU)."""
    refuse_eacces, refuse_enoent = _op(_RET, _ERRNO | _EACCES), _op(_RET, _ERRNO | _ENOENT)
    if network:
        return [_op(_JEQ, _SOCKET, jf=6), _op(_LD_ABS, 16), _op(_JEQ, _AF_UNIX, jt=2), _op(_JEQ, _AF_INET, jt=1),
                _op(_JEQ, _AF_INET6, jf=1), _op(_RET, _ALLOW), refuse_eacces,
                _op(_JEQ, _REFUSED["io_uring_setup"], jf=1), refuse_eacces]
    prog = [_op(_JEQ, _SOCKET, jf=4), _op(_LD_ABS, 16), _op(_JEQ, _AF_UNIX, jf=1), _op(_RET, _ALLOW), refuse_eacces,
            _op(_JEQ, _CONNECT, jf=1), refuse_enoent,
            _op(_JEQ, _SENDTO, jf=6), _op(_LD_ABS, 48), _op(_JEQ, 0, jf=3), _op(_LD_ABS, 52), _op(_JEQ, 0, jf=1),
            _op(_RET, _ALLOW), refuse_eacces]
    for nr in _REFUSED.values():
        prog += [_op(_JEQ, nr, jf=1), refuse_eacces]
    return prog


def _program(protected: list[int], network: bool = False) -> list[bytes]:
    """arch check, x32 check, socket rules, always-denied calls, then pid-targeted calls checked against
    `protected`."""
    prog = [_op(_LD_ABS, 4), _op(_JEQ, _AUDIT_ARCH_X86_64, jt=1), _op(_RET, _KILL_PROCESS), _op(_LD_ABS, 0),
            _op(_JGE, _X32_BIT, jf=1), _op(_RET, _KILL_PROCESS)]
    prog += _sockets(network)
    prog += [_op(_JEQ, nr, jt=len(_ALWAYS) - i + len(_BY_PID) + len(protected) + 2) for i, nr in enumerate(_ALWAYS.values())]
    prog += [_op(_JEQ, nr, jt=len(_BY_PID) - i) for i, nr in enumerate(_BY_PID.values())]
    prog += [_op(_RET, _ALLOW), _op(_LD_ABS, 16)]  # args[0], low 32 bits (pid_t)
    prog += [_op(_JEQ, pid, jt=len(protected) - i) for i, pid in enumerate(protected)]
    return prog + [_op(_RET, _ALLOW), _op(_RET, _KILL_PROCESS)]


def protected_pids() -> list[int]:
    """The parent, its process group and every process (-1) as kill(2) targets."""
    parent = os.getppid()
    return sorted({parent, -parent, -os.getpgid(parent), -1})


def forbid_touching_parent(network: bool = False) -> bool:
    """Install the filter on this process (and its future children); False where it cannot be installed.
    `network`: the profile variant (sockets of the child's own network namespace allowed)."""
    if platform.machine() != "x86_64":
        return False
    prog = b"".join(_program(protected_pids(), network))
    buf = ctypes.create_string_buffer(prog)
    fprog = _Fprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    return libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) == 0


if __name__ == "__main__":  # `python evaluator/sandbox/seccomp.py CMD...`: a tool (the compiler of a precompiled header)
    import sys            # under the same filter as the children; where none can be installed the batch said so

    forbid_touching_parent()
    os.execvp(sys.argv[1], sys.argv[1:])
