"""Real NATS (JetStream) and Postgres (pgvector) for the tests.

Where a Docker engine answers, testcontainers runs the same images as
docker-compose; elsewhere (CI has no engine) the embedded servers from PyPI
wheels are started in a temporary folder. Nothing is ever mocked.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Servers:
    nats_url: str
    database_url: str
    kind: str


def docker_available() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return (
            subprocess.run(
                ["docker", "info"], capture_output=True, timeout=10, check=False
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


@contextlib.contextmanager
def containers() -> Iterator[Servers]:
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs
    from testcontainers.postgres import PostgresContainer

    with (
        PostgresContainer("pgvector/pgvector:pg17", driver=None) as pg,
        DockerContainer("nats:2.11-alpine").with_command("-js").with_exposed_ports(4222) as nats,
    ):
        wait_for_logs(nats, "Server is ready")
        host, port = nats.get_container_host_ip(), nats.get_exposed_port(4222)
        yield Servers(f"nats://{host}:{port}", pg.get_connection_url(), "testcontainers")


@contextlib.contextmanager
def embedded(base: Path) -> Iterator[Servers]:
    from o_devtools.embedded import start_servers

    with start_servers(base) as servers:
        assert servers.nats is not None and servers.postgres is not None
        yield Servers(servers.nats.url, servers.postgres.url, "embedded")


@contextlib.contextmanager
def real_servers(base: Path) -> Iterator[Servers]:
    if docker_available():
        with containers() as s:
            yield s
    else:
        with embedded(base) as s:
            yield s
