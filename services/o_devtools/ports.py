"""A free TCP port on loopback, for servers and systems started on one machine (make run's
helpers, the tests, the chaos suite, the benchmarks)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nobody listens on now (the OS picks it; a race with another process taking it
    first is possible, and harmless for the local uses this serves)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port
