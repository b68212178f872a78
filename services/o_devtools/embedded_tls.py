"""The embedded NATS and Postgres with TLS on: the code paths a deployment uses, on one machine.

`make run` stays on loopback without TLS; the tests (tests/e2e/test_tls.py) and the
benchmark (`bench.agent_loop --tls`) start these instead, with certificates they make
(certs.py), so what services do with `O_NATS_TLS_*` and a `DATABASE_URL` with
`sslmode=verify-full` is exercised against real servers:

- nats-server with a `tls` block: its certificate, clients' certificates verified against the
  CA (mutual TLS), the TLS handshake before anything else (`handshake_first`, as O's clients
  do it: nats_tls.py);
- Postgres reached on 127.0.0.1 over TLS only, through a TLS front (pg_tls_front.py says why:
  the embedded build has no SSL); clients verify it with `sslmode=verify-full`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from o_devtools.certs import Certificates
from o_devtools.embedded import (
    EmbeddedNats,
    EmbeddedPostgres,
    EmbeddedServers,
    ServerExited,
    die_with_parent,
)
from o_runtime.nats_identity import Identity
from o_runtime.nats_tls import NatsTls


def client_tls(certs: Certificates) -> NatsTls:
    """How O's processes connect to `TlsNats`: trusting the CA, with the client certificate."""
    return NatsTls(ca_file=certs.ca, cert_file=certs.client.cert, key_file=certs.client.key)


def client_env(certs: Certificates) -> dict[str, str]:
    """The same as environment variables, for service processes."""
    return {
        "O_NATS_TLS_CA": str(certs.ca),
        "O_NATS_TLS_CERT": str(certs.client.cert),
        "O_NATS_TLS_KEY": str(certs.client.key),
    }


class TlsNats(EmbeddedNats):
    """EmbeddedNats whose clients must speak TLS first and show a certificate the CA signed."""

    def __init__(self, base: Path, certs: Certificates, *, auth: bool = True) -> None:
        super().__init__(base, auth=auth)
        self.certs = certs
        self.tls = client_tls(certs)

    @property
    def url(self) -> str:
        return super().url.replace("nats://", "tls://", 1)

    def extra_config(self) -> str:
        c = self.certs
        return (
            "tls {\n"
            f'  cert_file: "{c.server.cert}"\n'
            f'  key_file: "{c.server.key}"\n'
            f'  ca_file: "{c.ca}"\n'
            "  verify: true\n"
            "  handshake_first: true\n"
            # Generous on a loaded 2-core machine (the default is 0.5 s).
            "  timeout: 5\n"
            "}\n"
        )

    def answers(self, port: int) -> bool:
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=0.5) as raw,
                self.tls.context.wrap_socket(raw, server_hostname="127.0.0.1") as sock,
            ):
                return sock.recv(4).startswith(b"INFO")
        except (OSError, ssl.SSLError):
            return False

    def initialize(self) -> None:
        from o_setup import apply_topology_blocking

        setup = Identity.from_file("setup", self.seed_file("setup")).with_tls(self.tls)
        apply_topology_blocking(self.url, setup, os.environ)


class TlsPostgres(EmbeddedPostgres):
    """EmbeddedPostgres reached over TCP only through TLS, by way of its TLS front
    (pg_tls_front.py: the embedded build has no SSL of its own)."""

    def __init__(self, base: Path, certs: Certificates, database: str = "o") -> None:
        super().__init__(base, database)
        self.certs = certs
        self.port: int | None = None
        self.front: subprocess.Popen[str] | None = None

    def initialize(self) -> None:
        super().initialize()
        if self.front is not None and self.front.poll() is None:
            return
        assert self._socket_dir is not None
        front = subprocess.Popen(
            [
                sys.executable, str(Path(__file__).with_name("pg_tls_front.py")),
                "--socket-dir", str(self._socket_dir),
                "--port", str(self.port or 0),
                "--cert", str(self.certs.server.cert),
                "--key", str(self.certs.server.key),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=die_with_parent(signal.SIGTERM),
        )  # fmt: skip
        assert front.stdout is not None
        line = front.stdout.readline().split()
        if line[:1] != ["ready"]:
            front.kill()
            front.wait()
            raise ServerExited(f"the Postgres TLS front did not start ({line})")
        self.port = int(line[1])
        self.front = front

    def stop(self, timeout: float = 15.0) -> None:
        front, self.front = self.front, None
        if front is not None and front.poll() is None:
            front.terminate()
            try:
                front.wait(timeout)
            except subprocess.TimeoutExpired:
                front.kill()
                front.wait()
        super().stop(timeout)

    @property
    def url(self) -> str:
        super().url  # noqa: B018  (raises while not started)
        return self.tls_url(self.database)

    def tls_url(self, database: str, ca: Path | None = None) -> str:
        """A DSN for `database` over TCP that verifies the server against `ca` (default: the
        CA that signed it) and its name, as a deployment's DATABASE_URL does."""
        if self.port is None:
            raise RuntimeError("TlsPostgres is not started")
        root = ca or self.certs.ca
        return (
            f"postgresql://postgres@127.0.0.1:{self.port}/{database}"
            f"?sslmode=verify-full&sslrootcert={root}"
        )


@contextlib.contextmanager
def start_tls_servers(
    base: Path, certs: Certificates, *, nats_auth: bool = True, postgres_tls: bool = True
) -> Iterator[EmbeddedServers]:
    """NATS and Postgres with TLS in `base` (Postgres on its socket alone with
    `postgres_tls` False), stopped on exit."""
    servers = EmbeddedServers()
    try:
        servers.nats = TlsNats(base, certs, auth=nats_auth)
        servers.nats.start()
        servers.postgres = TlsPostgres(base, certs) if postgres_tls else EmbeddedPostgres(base)
        servers.postgres.start()
        yield servers
    finally:
        servers.stop()
