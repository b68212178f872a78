"""A worker's exit is awaited from the moment the zygote names its pid: a zygote that dies
right after forking it (or a worker that exits at once) is not missed, so a run never waits
for an exit nobody will report. The zygote here is the far end of a socket pair."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys

import pytest

from o_tool_sandbox.pool import ZYGOTE, Zygote, ZygoteExited


def zygote_on(sock: socket.socket) -> Zygote:
    zygote = Zygote("python3")
    sock.setblocking(False)
    zygote.sock = sock
    zygote._reader = asyncio.create_task(zygote._read())
    return zygote


Forking = asyncio.Task[tuple[int, asyncio.Future[int]]]


async def forked(zygote: Zygote, far: socket.socket) -> Forking:
    """fork() under way, its request read by the far end."""
    r, w = os.pipe()
    try:
        task = asyncio.create_task(zygote.fork({}, [r, w]))
        await asyncio.sleep(0)
        _, fds, _, _ = socket.recv_fds(far, 1 << 16, 4)
        for fd in fds:
            os.close(fd)
        return task
    finally:
        os.close(r)
        os.close(w)


async def test_a_zygote_that_dies_right_after_a_fork_fails_that_workers_exit() -> None:
    ours, far = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    zygote = zygote_on(ours)
    task = await forked(zygote, far)
    # The pid, then the zygote's end closes, before fork() has resumed.
    far.send(json.dumps({"ref": 1, "pid": 4242}).encode())
    far.close()
    pid, exited = await asyncio.wait_for(task, 5)
    assert pid == 4242
    with pytest.raises(RuntimeError, match="zygote exited"):
        await asyncio.wait_for(exited, 5)
    assert not zygote.alive
    await zygote.close()


async def test_a_worker_that_exits_at_once_has_its_exit_status() -> None:
    ours, far = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    zygote = zygote_on(ours)
    task = await forked(zygote, far)
    far.send(json.dumps({"ref": 1, "pid": 4243}).encode())
    far.send(json.dumps({"exited": 4243, "code": 3}).encode())
    pid, exited = await asyncio.wait_for(task, 5)
    assert (pid, await asyncio.wait_for(exited, 5)) == (4243, 3)
    far.close()
    await zygote.close()


async def test_a_fork_asked_of_a_dead_zygote_says_so() -> None:
    ours, far = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    zygote = zygote_on(ours)
    far.close()
    await asyncio.wait_for(zygote._reader, 5)  # type: ignore[arg-type]
    r, w = os.pipe()
    try:
        with pytest.raises(ZygoteExited):
            await zygote.fork({}, [r, w])
    finally:
        os.close(r)
        os.close(w)
    await zygote.close()


def test_a_zygote_whose_pool_dies_with_answers_unread_exits_quietly() -> None:
    # The pool SIGKILLed with the zygote's answers unread: the zygote's next read is a
    # connection reset, which ends it as a closed socket does, with no traceback in the
    # sandbox's log (the chaos suite's logs had one at each kill).
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", ZYGOTE, str(theirs.fileno())],
        pass_fds=(theirs.fileno(),),
        stderr=subprocess.PIPE,
    )
    theirs.close()
    r, w = os.pipe()
    # A worker that cannot start (no config): the zygote answers with its pid, then with
    # its exit; neither is read.
    socket.send_fds(ours, [json.dumps({"ref": 1, "config": {}}).encode()], [r, w, r, w])
    os.close(r)
    os.close(w)
    ours.recv(1 << 16, socket.MSG_PEEK)  # (its first answer is there)
    ours.close()
    _, stderr = proc.communicate(timeout=10)
    assert (proc.returncode, stderr.decode()) == (0, "")
