"""Kernel confinement for one sandbox worker, applied to itself before it runs a tool.

Standard library only (ctypes): the worker runs in a clean interpreter
(`python -I -S`) that imports nothing of O's. Each step reports whether it
took effect, so the sandbox can tell `/v1/health/` what this host enforces:

- namespaces (root only): a new network namespace (no interfaces but a down
  loopback: nothing to connect to) and a new PID namespace (the tool is PID 1
  of its own process tree; killing it kills every process it started, and
  O's processes are not visible to it);
- a different uid/gid per worker (root only), so it cannot signal or ptrace
  O's processes or other tools, and RLIMIT_NPROC counts only its processes;
- Landlock (unprivileged, Linux 5.13+): reads only the Python standard
  library and system libraries, writes only its scratch directory; TCP bind
  and connect denied (ABI 4+); signals and abstract Unix sockets scoped to
  its own processes (ABI 6+);
- seccomp (unprivileged): `socket()` and `io_uring_setup()` fail with EPERM,
  whatever namespace exists, so no socket of any family can be opened.
"""

from __future__ import annotations

import ctypes
import os
import struct

# Every import delays each worker's start: `typing` alone costs ~8 ms.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2


class _Arch:
    def __init__(
        self, audit: int, socket: int, io_uring_setup: int, landlock: tuple[int, int, int]
    ) -> None:
        self.audit = audit  # seccomp's AUDIT_ARCH_*
        self.socket = socket
        self.io_uring_setup = io_uring_setup
        self.landlock = landlock  # create_ruleset, add_rule, restrict_self


_ARCH = {
    "x86_64": _Arch(0xC000003E, 41, 425, (444, 445, 446)),
    "aarch64": _Arch(0xC00000B7, 198, 425, (444, 445, 446)),
}


def _arch() -> _Arch | None:
    return _ARCH.get(os.uname().machine)


def unshare_namespaces(new_network: bool = True) -> list[str]:
    """New network and PID namespaces if the kernel lets us (needs CAP_SYS_ADMIN).

    `new_network=False` keeps the host's network (an MCP server the operator lets out).
    """
    done = []
    wanted = ((CLONE_NEWNET, "network"), (CLONE_NEWPID, "pid"))
    for flag, name in wanted if new_network else wanted[1:]:
        if _libc.unshare(flag) == 0:
            done.append(name)
    return done


def drop_privileges(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


def set_parent_death_signal(sig: int) -> None:
    # Cleared by a uid change, so set after dropping privileges.
    _libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)


def no_new_privs() -> bool:
    return bool(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0)


# Landlock ------------------------------------------------------------------

_FS_EXECUTE = 1 << 0
_FS_WRITE_FILE = 1 << 1
_FS_READ_FILE = 1 << 2
_FS_READ_DIR = 1 << 3
_FS_READ = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
_FILE_RIGHTS_V1 = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE
_TRUNCATE = 1 << 14
_IOCTL_DEV = 1 << 15


_RULE_NET_PORT = 2
_NET_CONNECT_TCP = 1 << 1


def _fs_rights(abi: int) -> int:
    bits = 13  # ABI 1: execute .. make_sym
    if abi >= 2:
        bits = 14  # refer
    if abi >= 3:
        bits = 15  # truncate
    if abi >= 5:
        bits = 16  # ioctl_dev
    return (1 << bits) - 1


def landlock(
    read_paths: Iterable[str],
    write_paths: Iterable[str],
    files: Iterable[str],
    allow_tcp: bool = False,
    tcp_ports: Iterable[int] | None = None,
) -> str:
    """Restrict this process (and its children) to these paths; returns what applied.

    TCP bind and connect are denied too, unless `allow_tcp` (an MCP server, or a tool,
    the operator lets reach any port) or but for connecting to `tcp_ports` (a tool the
    operator lets reach those ports only).
    """
    arch = _arch()
    if arch is None:
        return "unavailable (architecture)"
    create, add_rule, restrict = arch.landlock
    abi = _libc.syscall(create, None, 0, 1)
    if abi < 1:
        return "unavailable (kernel)"
    fs = _fs_rights(abi)
    net = 0b11 if abi >= 4 and not allow_tcp else 0  # bind_tcp | connect_tcp
    ports = sorted(set(tcp_ports or ()))
    scoped = 0b11 if abi >= 6 else 0  # abstract unix sockets | signals
    attr = struct.pack("QQQ", fs, net, scoped)
    size = 8 if abi < 4 else (16 if abi < 6 else 24)
    buf = ctypes.create_string_buffer(attr[:size], size)
    ruleset = _libc.syscall(create, buf, size, 0)
    if ruleset < 0:
        return f"unavailable (errno {ctypes.get_errno()})"
    try:
        file_rights = _FILE_RIGHTS_V1 | (_TRUNCATE if abi >= 3 else 0)
        for paths, rights in ((read_paths, _FS_READ), (write_paths, fs)):
            for path in paths:
                _allow(add_rule, ruleset, path, rights)
        for path in files:
            _allow(add_rule, ruleset, path, file_rights)
        if net:
            for port in ports:
                rule = ctypes.create_string_buffer(struct.pack("=QQ", _NET_CONNECT_TCP, port), 16)
                if _libc.syscall(add_rule, ruleset, _RULE_NET_PORT, rule, 0) != 0:
                    return f"failed (port {port}: errno {ctypes.get_errno()})"
        if _libc.syscall(restrict, ruleset, 0) != 0:
            return f"failed (errno {ctypes.get_errno()})"
    finally:
        os.close(ruleset)
    tcp = ["tcp"] if net and not ports else [f"tcp (connect to {','.join(map(str, ports))})"]
    parts = ["filesystem"] + (tcp if net else []) + (["signals"] if scoped else [])
    return f"abi {abi}: " + ", ".join(parts)


def _allow(add_rule: int, ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not os.path.isdir(path):
            rights &= _FILE_RIGHTS_V1 | _TRUNCATE | _IOCTL_DEV
        attr = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)
        _libc.syscall(add_rule, ruleset, 1, attr, 0)
    finally:
        os.close(fd)


# seccomp -------------------------------------------------------------------

_RET_ALLOW = 0x7FFF0000
_RET_ERRNO_EPERM = 0x00050000 | 1
_RET_KILL_PROCESS = 0x80000000
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06


def _ins(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def _syscall_of(arch: _Arch) -> list[bytes]:
    """A filter's start: kill a call of a foreign ABI (int 0x80: no way around the filter),
    else load the call's number."""
    return [
        _ins(_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
        _ins(_JEQ_K, 1, 0, arch.audit),
        _ins(_RET_K, 0, 0, _RET_KILL_PROCESS),
        _ins(_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
    ]


def seccomp_no_sockets() -> bool:
    """Make socket() and io_uring_setup() fail with EPERM; other architectures' calls kill.

    io_uring is denied because its requests can open sockets without socket().
    Needs no_new_privs first.
    """
    arch = _arch()
    if arch is None:
        return False
    ins = _ins
    prog = [
        *_syscall_of(arch),
        ins(_JGE_K, 3, 0, 0x40000000),  # x32 ABI numbers
        ins(_JEQ_K, 2, 0, arch.socket),
        ins(_JEQ_K, 1, 0, arch.io_uring_setup),
        ins(_RET_K, 0, 0, _RET_ALLOW),
        ins(_RET_K, 0, 0, _RET_ERRNO_EPERM),
    ]
    return _install_filter(prog)


_AF_INET = 2
_AF_INET6 = 10
# seccomp_data: nr (4 bytes), arch (4), instruction_pointer (8), args[6] (8 each); the low
# half of args[0] on these little-endian architectures.
_ARG0 = 16


def seccomp_inet_sockets_only() -> bool:
    """For a tool let out: socket() only of IPv4 and IPv6 (no Unix, netlink, packet or
    other family: no local services by path, no abstract sockets, no raw frames);
    io_uring_setup() fails with EPERM; other architectures' calls kill."""
    arch = _arch()
    if arch is None:
        return False
    ins = _ins
    prog = [
        *_syscall_of(arch),  # 0-3
        ins(_JGE_K, 6, 0, 0x40000000),  # x32 ABI numbers: deny (11)
        ins(_JEQ_K, 5, 0, arch.io_uring_setup),  # deny (11)
        ins(_JEQ_K, 1, 0, arch.socket),  # (8)
        ins(_RET_K, 0, 0, _RET_ALLOW),
        ins(_LD_W_ABS, 0, 0, _ARG0),  # 8: socket()'s family
        ins(_JEQ_K, 2, 0, _AF_INET),  # allow (12)
        ins(_JEQ_K, 1, 0, _AF_INET6),  # allow (12)
        ins(_RET_K, 0, 0, _RET_ERRNO_EPERM),  # 11
        ins(_RET_K, 0, 0, _RET_ALLOW),  # 12
    ]
    return _install_filter(prog)


def _install_filter(prog: list[bytes]) -> bool:
    code = b"".join(prog)
    filters = ctypes.create_string_buffer(code, len(code))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog), ctypes.cast(filters, ctypes.c_void_p))
    return bool(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) == 0)
