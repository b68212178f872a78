"""The zygote: a clean interpreter that forks sandbox workers on request.

Starting a Python interpreter costs ~20 ms of CPU; forking one that has
already started costs ~1 ms. The pool starts this process once (root, with a
scrubbed environment, `python -I -S zygote.py <control fd>`); for each
worker it sends, over a SOCK_SEQPACKET socket, the worker's config and its
four pipe ends (stdin, stdout, stderr, result). The zygote forks; the child
takes those pipes as fds 0-3, closes everything else (the control socket
first: a tool must never talk to the zygote) and becomes a worker
(worker.serve: confine, run one job, exit). The zygote answers with the
child's pid and later with its exit status. It runs no user code itself.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys

# Only the sandbox's own standard-library modules are imported from O.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from o_tool_sandbox import confine, worker

del sys.path[0]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _child(control: socket.socket, fds: list[int], cfg: dict[str, Any], zygote: int) -> None:
    # Dies with the zygote (worker.py sets it again once confined). A zygote killed before
    # this line left an orphan that nothing would stop: it ends here.
    confine.set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != zygote:
        os._exit(70)
    os.setsid()  # its own process group: the pool kills it with killpg
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    control.close()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    os.closerange(len(fds), 1 << 16)
    cfg["result_fd"] = 3
    try:
        worker.serve(cfg)
    finally:
        os._exit(70)


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    confine.set_parent_death_signal(signal.SIGKILL)  # dies with the sandbox service
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    while True:
        ready, _, _ = select.select([control.fileno(), wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
            _reap(control)
        if control.fileno() in ready:
            try:
                data, fds, _, _ = socket.recv_fds(control, 1 << 20, 4)
            except InterruptedError:
                continue
            except ConnectionResetError:
                os._exit(0)  # the pool died (SIGKILL) with data unread: it is gone
            if not data:
                os._exit(0)  # the pool closed the socket: it is gone
            request = json.loads(data)
            zygote = os.getpid()
            pid = os.fork()
            if pid == 0:
                _child(control, fds, request["config"], zygote)
            for fd in fds:
                os.close(fd)
            control.send(json.dumps({"ref": request["ref"], "pid": pid}).encode())


def _reap(control: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = os.waitstatus_to_exitcode(status)
        control.send(json.dumps({"exited": pid, "code": code}).encode())


if __name__ == "__main__":
    main()
