"""A Postgres of the machine's own, on 127.0.0.1 over TCP, plain or with its own TLS: a
benchmark's stand-in for a deployment's database server.

The embedded Postgres (embedded.py) is built without SSL, so the TLS to Postgres the tests use
goes through a Python relay (pg_tls_front.py) whose own CPU and hop would dominate what is
measured. To know what TLS to Postgres costs the agent loop (`bench.agent_loop
--postgres-bin DIR [--tls postgres]`, bench/README.md#tls), this runs a Postgres built with
SSL and pgvector from `bin_dir` (Debian's postgresql-15 with pgvector built from source, say)
the way EmbeddedPostgres runs the wheel's, in the same data folder layout, and listening on
a loopback port:

- plain (`certs` None): `host` rules, clients with `sslmode=disable`;
- TLS: `ssl=on` with the server certificate certs.py made, `hostssl` rules only (a plaintext
  client is refused), clients with `sslmode=verify-full` and the CA, as in `k8s/`.

The same binary and settings in both, so the two differ by TLS alone. Never used by `make run`
or the tests' shared system; the unix socket stays for the owner's own psql.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from o_devtools.certs import Certificates
from o_devtools.embedded import EmbeddedPostgres
from o_devtools.ports import free_port

# Loopback only, no password: trust, as the embedded server's socket has it.
_HBA_PLAIN = "local all all trust\nhost all all 127.0.0.1/32 trust\n"
_HBA_TLS = "local all all trust\nhostssl all all 127.0.0.1/32 trust\n"


class NativePostgres(EmbeddedPostgres):
    """Postgres from `bin_dir` (with pgvector installed there) on a loopback port; with
    `certs`, reachable over TCP by TLS only."""

    name = "postgres (native)"

    def __init__(
        self, base: Path, bin_dir: Path, certs: Certificates | None = None, database: str = "o"
    ) -> None:
        super().__init__(base, database)
        self._bin_dir = Path(bin_dir)
        if not (self._bin_dir / "postgres").is_file():
            raise FileNotFoundError(f"no postgres in {self._bin_dir}")
        self.certs = certs
        # Kept across restarts, as the socket is: clients already hold the address. (Postgres
        # cannot pick a port itself; the window until it binds is a benchmark's risk.)
        self.port = free_port()

    @property
    def bin_dir(self) -> Path:
        return self._bin_dir

    @property
    def tls(self) -> bool:
        return self.certs is not None

    def listen_args(self) -> list[str]:
        args = ["-h", "127.0.0.1", "-p", str(self.port), "-c", f"ssl={'on' if self.tls else 'off'}"]
        if self.tls:
            # Copies in the data folder: Postgres reads them as its own user, and refuses a key
            # that others can read.
            args += ["-c", "ssl_cert_file=server.crt", "-c", "ssl_key_file=server.key"]
        return args

    def _uri(self, database: str) -> str:
        # The owner's own psql, on the socket, which is named after the port.
        return f"{super()._uri(database)}&port={self.port}"

    def prepare(self) -> None:
        super().prepare()
        (self.pgdata / "pg_hba.conf").write_text(_HBA_TLS if self.tls else _HBA_PLAIN)
        if self.certs is not None:
            shutil.copyfile(self.certs.server.cert, self.pgdata / "server.crt")
            key = self.pgdata / "server.key"
            shutil.copyfile(self.certs.server.key, key)
            key.chmod(0o600)
        if self._user is not None:
            import pwd

            entry = pwd.getpwnam(self._user)
            for name in ("pg_hba.conf", "server.crt", "server.key"):
                if (self.pgdata / name).exists():
                    os.chown(self.pgdata / name, entry.pw_uid, entry.pw_gid)

    @property
    def url(self) -> str:
        super().url  # noqa: B018  (raises while not started)
        return self.tcp_url(self.database)

    def tcp_url(self, database: str) -> str:
        """A DSN over TCP: with TLS, verifying the server against the CA that signed it and its
        name (as a deployment's DATABASE_URL); without, plain (`sslmode=disable`)."""
        base = f"postgresql://postgres@127.0.0.1:{self.port}/{database}"
        if self.certs is None:
            return f"{base}?sslmode=disable"
        return f"{base}?sslmode=verify-full&sslrootcert={self.certs.ca}"
