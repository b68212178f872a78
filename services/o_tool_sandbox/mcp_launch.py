"""Start one stdio MCP server confined: the program the MCP SDK's stdio client spawns.

`python -I -S mcp_launch.py`, with its settings as JSON in the environment variable
`O_MCP_LAUNCH` (not in argv, which every process on the host can read: the server's
environment holds its decrypted secrets). Started as the sandbox's child, it confines
itself as a tool worker does (worker.py, confine.py) and then becomes the server:

- namespaces (root only): a PID namespace, and a network namespace unless the operator
  lets MCP servers out. In a PID namespace this process stays outside and waits; its
  child is PID 1 there, a small init that reaps orphans and ends with the server, so
  whatever the server started dies with it;
- rlimits, the server's own uid (root only), no_new_privs, Landlock (read: system
  folders, the interpreter, the server's own installation and files; write: its
  scratch folder), and, without network, seccomp with no sockets;
- one line on stderr, `O-SANDBOX-CONFINED {json}`, saying what applied, then exec of
  the server with only its own environment. stdin and stdout are the MCP channel.

Standard library only: nothing of O's is importable here but confine.py.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from o_tool_sandbox import confine  # noqa: E402

del sys.path[0]

CONFIG_VARIABLE = "O_MCP_LAUNCH"
CONFINED_PREFIX = "O-SANDBOX-CONFINED "
# Exit statuses the sandbox reads as "never started" (the reason is on stderr).
REFUSED = 125
CANNOT_EXEC = 126
DEVICES = ["/dev/null", "/dev/urandom", "/dev/random", "/dev/zero"]


def _fail(code: int, reason: str) -> None:
    os.write(2, f"{reason}\n".encode(errors="replace"))
    os._exit(code)


def _limits(cfg: dict[str, int]) -> None:
    for name, value in (
        ("RLIMIT_CPU", cfg["cpu_seconds"]),
        ("RLIMIT_AS", cfg["memory_bytes"]),
        ("RLIMIT_FSIZE", cfg["file_bytes"]),
        ("RLIMIT_NPROC", cfg["processes"]),
        ("RLIMIT_NOFILE", cfg["open_files"]),
        ("RLIMIT_CORE", 0),
    ):
        hard = value + 1 if name == "RLIMIT_CPU" else value
        resource.setrlimit(getattr(resource, name), (value, hard))


def _wait_outside(child: int) -> None:
    """Outside the PID namespace: hold no end of the MCP channel, end as PID 1 ends."""
    for fd in (0, 1, 2):
        os.close(fd)
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    os._exit(128 - code if code < 0 else code)


def _init(server: int) -> None:
    """PID 1 of the namespace: reap everything, end with the server's status."""
    for fd in (0, 1, 2):
        os.close(fd)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(0)
        except InterruptedError:
            continue
        if pid == server:
            code = os.waitstatus_to_exitcode(status)
            os._exit(128 - code if code < 0 else code)


def confine_self(cfg: dict[str, Any]) -> dict[str, object]:
    """Everything but the exec; returns what applied (the launcher reports it)."""
    applied: dict[str, object] = {}
    network = bool(cfg.get("network"))
    confine.set_parent_death_signal(signal.SIGKILL)  # dies with the sandbox service
    namespaces = confine.unshare_namespaces(new_network=not network) if os.geteuid() == 0 else []
    applied["namespaces"] = namespaces
    if "pid" in namespaces:
        child = os.fork()
        if child:
            _wait_outside(child)
    os.chdir(str(cfg["scratch"]))
    _limits(cfg["limits"])
    uid = cfg.get("uid")
    if os.geteuid() == 0 and isinstance(uid, int):
        confine.drop_privileges(uid, uid)
    applied["uid"] = os.geteuid()
    confine.set_parent_death_signal(signal.SIGKILL)  # cleared by the uid change
    if not confine.no_new_privs():
        _fail(REFUSED, "the sandbox could not set no_new_privs; refusing to start the server")
    applied["landlock"] = confine.landlock(
        cfg["read_paths"], [str(cfg["scratch"])], DEVICES, allow_tcp=network
    )
    applied["seccomp"] = False if network else confine.seccomp_no_sockets()
    applied["network"] = network
    if not network and "network" not in namespaces and not applied["seccomp"]:
        _fail(
            REFUSED,
            "this sandbox cannot cut MCP servers off from the network here (no network "
            "namespace and no seccomp); refusing to start one",
        )
    applied["pid1"] = os.getpid() == 1
    return applied


def main() -> None:
    cfg = json.loads(os.environ.pop(CONFIG_VARIABLE))
    try:
        applied = confine_self(cfg)
    except OSError as exc:
        _fail(REFUSED, f"the sandbox could not confine the MCP server: {exc}")
    command = str(cfg["command"])
    argv = [command, *[str(a) for a in cfg["args"]]]
    env = {str(k): str(v) for k, v in cfg["env"].items()}
    os.write(2, (CONFINED_PREFIX + json.dumps(applied) + "\n").encode())
    if applied["pid1"]:
        server = os.fork()
        if server:
            _init(server)
    try:
        os.execve(command, argv, env)
    except OSError as exc:
        _fail(CANNOT_EXEC, f"cannot start {command}: {exc.strerror or exc}")


if __name__ == "__main__":
    main()
