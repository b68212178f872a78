"""One sandbox worker: confine this process, wait for one tool call, run it, exit.

Forked by the zygote (zygote.py), or started alone as
`python -I -S worker.py '<config json>'`, with a scrubbed environment. It
confines itself (see confine.py), writes a ready line with what applied to
the result pipe, then reads one job (JSON) from stdin, runs
the tool, writes the outcome as one JSON line to the result pipe and exits.
The tool's own stdout and stderr are the process's fd 1 and 2, pipes the pool
reads with a bound. Standard library only: nothing of O's is importable here.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time

TYPE_CHECKING = False  # not `typing`: importing it would delay every worker's start
if TYPE_CHECKING:
    from typing import Any

# Only confine.py (standard library) is imported from O, then the path is dropped.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from o_tool_sandbox import confine  # noqa: E402

del sys.path[0]


MAX_RETURN = 256 * 1024


def _limits(cfg: dict[str, int]) -> None:
    for name, value in (
        ("RLIMIT_CPU", cfg["cpu_seconds"]),
        ("RLIMIT_AS", cfg["memory_bytes"]),
        ("RLIMIT_FSIZE", cfg["file_bytes"]),
        ("RLIMIT_NPROC", cfg["processes"]),
        ("RLIMIT_NOFILE", cfg["open_files"]),
        ("RLIMIT_CORE", 0),
    ):
        # CPU: the soft limit sends SIGXCPU (reported as such), the hard one kills.
        hard = value + 1 if name == "RLIMIT_CPU" else value
        resource.setrlimit(getattr(resource, name), (value, hard))


def _confine(cfg: dict[str, Any], result: int) -> dict[str, object]:
    applied: dict[str, object] = {}
    # If the sandbox service dies (even by SIGKILL), its workers die with it.
    confine.set_parent_death_signal(signal.SIGKILL)
    # Let out by the operator (O_SANDBOX_NETWORK): the host's network, IPv4/IPv6 sockets
    # only, TCP connect only to the ports named (none named: any).
    network = cfg.get("network") or {}
    let_out = bool(network.get("enabled"))
    ports = network.get("ports")
    namespaces = confine.unshare_namespaces(new_network=not let_out) if os.geteuid() == 0 else []
    applied["namespaces"] = namespaces
    if "pid" in namespaces:
        # The first child in a new PID namespace is its PID 1: when it exits,
        # the kernel kills everything the tool started. We only wait for it.
        child = os.fork()
        if child:
            for fd in (0, 1, 2, result):
                os.close(fd)
            _, status = os.waitpid(child, 0)
            code = os.waitstatus_to_exitcode(status)
            os._exit(128 - code if code < 0 else code)
    scratch = str(cfg["scratch"])
    os.chdir(scratch)
    _limits(cfg["limits"])
    uid = cfg.get("uid")
    if os.geteuid() == 0 and isinstance(uid, int):
        confine.drop_privileges(uid, uid)
        applied["uid"] = uid
    else:
        applied["uid"] = None
    if os.getpid() == 1:
        # PID 1 ignores signals it has no handler for, the kernel's SIGXCPU
        # included: end with the status the pool reads as "CPU limit".
        signal.signal(signal.SIGXCPU, lambda *_: os._exit(128 + signal.SIGXCPU))
    confine.set_parent_death_signal(signal.SIGKILL)
    if not confine.no_new_privs():
        raise SystemExit("no_new_privs failed")
    applied["landlock"] = confine.landlock(
        cfg["read_paths"],
        [scratch],
        ["/dev/null", "/dev/urandom", "/dev/zero", "/etc/localtime", "/etc/ld.so.cache"],
        allow_tcp=let_out and ports is None,
        tcp_ports=ports if let_out else None,
    )
    applied["seccomp"] = (
        confine.seccomp_inet_sockets_only() if let_out else confine.seccomp_no_sockets()
    )
    applied["network"] = let_out
    applied["pid1"] = os.getpid() == 1
    return applied


def _text(value: object) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return str(value)


def _run(job: dict[str, Any]) -> dict[str, object]:
    namespace: dict[str, object] = {"__name__": "__tool__"}
    try:
        if job.get("paths"):
            # The tool's installed packages (pip_requirements), .pth files included.
            import site

            for path in job["paths"]:
                site.addsitedir(str(path))
        exec(compile(str(job["source"]), "<tool>", "exec"), namespace)
        fn = namespace.get(str(job["name"]))
        if not callable(fn):
            return {"ok": False, "failure": "exception", "error": f"no function {job['name']}"}
        args = dict(job["args"])
        code = getattr(fn, "__code__", None)
        if code is not None and "agent_state" in code.co_varnames[: code.co_argcount]:
            # Letta passes the agent's state here; the sandbox has none to give.
            args.setdefault("agent_state", None)
        value = fn(**args)
        if hasattr(value, "__await__"):
            import asyncio

            value = asyncio.run(value)
        text = _text(value)
        if len(text) > MAX_RETURN:
            # The tool's own return_char_limit cuts further; this bounds the pipe.
            text = text[:MAX_RETURN] + f"\n[truncated: the return was {len(text)} characters]"
        return {"ok": True, "return": text}
    except MemoryError:
        return {"ok": False, "failure": "memory_limit", "error": "MemoryError: memory limit hit"}
    except BaseException as exc:  # the tool's own error, reported to the model
        import traceback  # only when needed: imports delay every worker's start

        # Only the tool's frames: the worker's are noise to the model.
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "<tool>"]
        where = "".join(f"  line {f.lineno}, in {f.name}\n" for f in frames)
        error = "".join(traceback.format_exception_only(exc)).strip()
        # The traceback goes to stderr too, as an uncaught exception's would (and as
        # Letta's tool returns show it).
        sys.stderr.write(
            "Traceback (most recent call last):\n"
            + "".join(traceback.format_list(frames))
            + f"{error}\n"
        )
        return {"ok": False, "failure": "exception", "error": f"{where}{error}"}


def main() -> None:
    serve(json.loads(sys.argv[1]))


def serve(cfg: dict[str, Any]) -> None:
    """Confine, answer ready, run one job, answer its outcome, exit (never returns)."""
    result = int(cfg["result_fd"])
    applied = _confine(cfg, result)
    me = os.getpid()
    out = os.fdopen(result, "w", buffering=1)
    out.write(json.dumps({"ready": applied}) + "\n")
    job = json.loads(sys.stdin.buffer.read())
    os.environ.clear()
    os.environ.update(
        {"PATH": "/usr/bin:/bin", "HOME": os.getcwd(), "TMPDIR": os.getcwd(), "LANG": "C.UTF-8"}
    )
    os.environ.update(job.get("env") or {})
    started = time.monotonic()
    outcome = _run(job)
    if os.getpid() != me:
        # A forked child of the tool came back through here: only PID 1 answers.
        os._exit(0)
    outcome["duration_ms"] = (time.monotonic() - started) * 1000
    sys.stdout.flush()
    sys.stderr.flush()
    out.write(json.dumps(outcome) + "\n")
    out.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
