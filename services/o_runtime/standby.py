"""A spare service process, started ahead of need, that takes over when a replica dies.

A service's cold start is mostly Python importing O and its libraries, and loading what the
service keeps in memory (the LLM SDKs, the local embedder): about two seconds on a 2-core
machine, which with one replica is how long a dead executor's runs wait (bench/takeover.py).
A spare started by the supervisor does all of that (`Service.preload`) and then waits,
connected to nothing and holding nothing, for one line on its stdin: `go` and it starts as
the replica it replaces (connect, migrate, take over what its predecessor held); end of
input (the supervisor stopping, or gone) and it exits. Nothing it did before `go` is visible
to the rest of the system, so a spare that is never promoted costs only its memory.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import BinaryIO

# Set by the supervisor in a spare's environment (o_devtools/supervisor.py): that it is
# one, and the pipe it says it is loaded on (to the supervisor, and benchmarks through it).
STANDBY_ENV = "O_STANDBY_SPARE"
READY_FD_ENV = "O_STANDBY_READY_FD"
PROMOTE = b"go"


def is_spare(environ: Mapping[str, str]) -> bool:
    return environ.get(STANDBY_ENV) == "1"


def say_loaded(environ: Mapping[str, str]) -> None:
    """Tell the supervisor this spare is loaded (if it gave a pipe to say it on)."""
    fd = environ.get(READY_FD_ENV)
    if fd is None or not fd.isdigit():
        return
    try:
        os.write(int(fd), b"loaded\n")
        os.close(int(fd))
    except OSError:  # (the supervisor's end closed: it is stopping or gone)
        pass


def promoted(stdin: BinaryIO | None = None) -> bool:
    """Block until the supervisor's word: True to start, False (end of input) to exit."""
    line = (stdin or sys.stdin.buffer).readline()
    return line.strip() == PROMOTE
