"""Real NATS (JetStream) and Postgres (pgvector) for the tests.

Where a Docker engine answers, testcontainers runs the same images as
docker-compose; elsewhere (CI has no engine) the embedded servers from PyPI
wheels are started in a temporary folder. Nothing is ever mocked.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from o_runtime.nats_identity import NKEY_ENV, Identity
from o_setup.credentials import Credentials


@dataclass
class Servers:
    nats_url: str
    database_url: str
    kind: str
    # The NATS identities (o_setup/credentials.py): the server accepts no one else.
    credentials: Credentials
    # Tell the running nats-server the credentials folder's keys (a configuration reload).
    reload: Callable[[], None]
    # Where nats-server keeps JetStream's files (None: inside a container).
    nats_store: Path | None = None

    def seed_file(self, role: str) -> Path:
        return self.credentials.seed_file(role)

    def identity(self, role: str = "operator") -> Identity:
        return Identity.from_file(role, self.seed_file(role))


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

    from o_setup import apply_topology_blocking
    from o_setup.server_config import authorization

    folder = Path(tempfile.mkdtemp(prefix="o-nats-auth-"))
    credentials = Credentials(folder / "keys")
    credentials.ensure()
    (folder / "nats-server.conf").write_text(authorization(credentials.users()))
    nats_container = (
        DockerContainer("nats:2.11-alpine")
        .with_command("-js -c /etc/o-nats/nats-server.conf")
        .with_volume_mapping(str(folder), "/etc/o-nats", "ro")
        .with_exposed_ports(4222)
    )
    with (
        PostgresContainer("pgvector/pgvector:pg17", driver=None) as pg,
        nats_container as nats,
    ):
        wait_for_logs(nats, "Server is ready")
        host, port = nats.get_container_host_ip(), nats.get_exposed_port(4222)
        url = f"nats://{host}:{port}"
        setup = Identity.from_file("setup", credentials.seed_file("setup"))
        apply_topology_blocking(url, setup, os.environ)

        def reload() -> None:
            (folder / "nats-server.conf").write_text(authorization(credentials.users()))
            nats.get_wrapped_container().kill(signal="SIGHUP")

        yield Servers(url, pg.get_connection_url(), "testcontainers", credentials, reload)


@contextlib.contextmanager
def embedded(base: Path) -> Iterator[Servers]:
    from o_devtools.embedded import start_servers

    with start_servers(base) as servers:
        assert servers.nats is not None and servers.postgres is not None
        yield Servers(
            servers.nats.url,
            servers.postgres.url,
            "embedded",
            servers.nats.credentials,
            servers.nats.reload,
            servers.nats.dir,
        )


@contextlib.contextmanager
def real_servers(base: Path) -> Iterator[Servers]:
    """The servers; meanwhile this process connects to NATS as the operator (O_NATS_NKEY:
    EventLog.connect's default identity, and `operator()` for plain nats-py clients)."""
    with containers() if docker_available() else embedded(base) as s:
        before = os.environ.get(NKEY_ENV)
        os.environ[NKEY_ENV] = str(s.seed_file("operator"))
        try:
            yield s
        finally:
            if before is None:
                os.environ.pop(NKEY_ENV, None)
            else:
                os.environ[NKEY_ENV] = before


def operator() -> dict[str, Any]:
    """`nats.connect` options of the operator identity the test servers accept."""
    return Identity.of("operator").options()
