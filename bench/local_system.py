"""The whole system on a machine of its own, for demos and benchmarks that talk to it over HTTP.

Embedded NATS and Postgres in a temporary folder (thrown away afterwards), the services as
real processes under the Supervisor (as `make run` starts them), pointed at a local
OpenAI-compatible server the caller starts (the tests' scripted FakeOpenAI, or the
zero-latency one), and an HTTP client for the gateway once it answers its health check.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "contracts"), str(ROOT / "services"), str(ROOT)]

from o_devtools.dev_secrets import data_folder_key  # noqa: E402
from o_devtools.embedded import (  # noqa: E402
    EmbeddedNats,
    EmbeddedPostgres,
    EmbeddedServers,
    start_servers,
)
from o_devtools.health import wait_healthy  # noqa: E402
from o_devtools.ports import free_port  # noqa: E402
from o_devtools.supervisor import (  # noqa: E402
    DEFAULT_SERVICES,
    ServiceSpec,
    Supervisor,
    with_identities,
)
from o_runtime.nats_identity import NKEY_ENV  # noqa: E402
from o_runtime.tool_secrets import KEY_ENV  # noqa: E402

API_KEY = "local"


@dataclass
class LocalSystem:
    base_url: str
    http: httpx.AsyncClient
    supervisor: Supervisor
    # The embedded NATS and Postgres (their urls and pids).
    servers: Any


def postgres_bin_argument(parser: argparse.ArgumentParser) -> None:
    """`--postgres-bin DIR` (default O_POSTGRES_BIN_DIR): local_system's `postgres_bin`."""
    parser.add_argument(
        "--postgres-bin",
        type=Path,
        default=os.environ.get("O_POSTGRES_BIN_DIR") or None,
        help="a Postgres built with SSL and pgvector to run on a loopback port instead of the"
        " embedded one (default: O_POSTGRES_BIN_DIR)",
    )


def _servers(
    base: Path, nats_auth: bool, tls: str | None, postgres_bin: Path | None
) -> contextlib.AbstractContextManager[Any]:
    if tls is None and postgres_bin is None:
        return start_servers(base, nats_auth=nats_auth)
    from o_devtools.certs import make_certificates
    from o_devtools.embedded_tls import TlsNats, TlsPostgres, client_env
    from o_devtools.native_postgres import NativePostgres

    certs = make_certificates(base / "certs")
    nats_tls, postgres_tls = tls in ("all", "nats"), tls in ("all", "postgres")
    nats = TlsNats(base, certs, auth=nats_auth) if nats_tls else EmbeddedNats(base, auth=nats_auth)
    if nats_tls:
        # This process (the operator's tools: bench timelines) connects with TLS too.
        os.environ.update(client_env(certs))
    postgres: EmbeddedPostgres
    if postgres_bin is not None:
        postgres = NativePostgres(base, postgres_bin, certs if postgres_tls else None)
    else:
        postgres = TlsPostgres(base, certs) if postgres_tls else EmbeddedPostgres(base)
    return _started(nats, postgres)


@contextlib.contextmanager
def _started(nats: EmbeddedNats, postgres: EmbeddedPostgres) -> Iterator[EmbeddedServers]:
    servers = EmbeddedServers()
    try:
        servers.nats = nats
        nats.start()
        servers.postgres = postgres
        postgres.start()
        yield servers
    finally:
        servers.stop()


@contextlib.asynccontextmanager
async def local_system(
    llm_base_url: str,
    services: Sequence[str] = DEFAULT_SERVICES,
    *,
    nats_auth: bool = True,
    tls: str | None = None,
    postgres_bin: Path | None = None,
    specs: Sequence[ServiceSpec] | None = None,
    restart_after: float | None = None,
    code_root: Path = ROOT,
    service_env: dict[str, str] | None = None,
    replicas: dict[str, int] | None = None,
) -> AsyncIterator[LocalSystem]:
    """The services running against `llm_base_url`, stopped (and their data removed) on exit.

    Each service connects as its own NATS role, as deployed; this process as the operator.
    `nats_auth=False` runs NATS without authorization, only to measure what it costs;
    `tls="all"` runs NATS and Postgres with TLS (o_devtools/embedded_tls.py), certificates made
    for the run, the services connecting as a deployment's do (`O_NATS_TLS_*`, `sslmode`);
    `tls="nats"` NATS alone (Postgres on its socket), `tls="postgres"` Postgres alone.
    `postgres_bin` runs the Postgres in that folder (with SSL and pgvector) on a loopback port
    instead of the embedded one (o_devtools/native_postgres.py), with its own TLS when `tls`
    covers Postgres: what a deployment's TLS to Postgres costs, without the tests' relay.
    `specs`, if given, replaces `services` and `replicas` (a setting of one service's own:
    bench/takeover.py); `restart_after`, if given, is how long the Supervisor waits before it
    restarts a process that exited, every time (otherwise at once after 30 s or more of life,
    else 0.5 s doubling). `code_root` runs the services from another checkout (a benchmark's
    A/B: main's code beside a branch's); `service_env` adds settings for the services;
    `replicas` runs several processes of a service (gateway replicas share the port, as
    `O_GATEWAY_REPLICAS` has them under `make run`).
    """
    with (
        tempfile.TemporaryDirectory(prefix="o-local-") as tmp,
        _servers(Path(tmp), nats_auth, tls, postgres_bin) as servers,
    ):
        assert servers.nats is not None and servers.postgres is not None
        os.environ[NKEY_ENV] = str(servers.nats.seed_file("operator"))
        port = free_port()
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                str(code_root / p) for p in ("contracts", "services", ".")
            ),
            "NATS_URL": servers.nats.url,
            "DATABASE_URL": servers.postgres.url,
            "OPENAI_BASE_URL": llm_base_url,
            "OPENAI_API_KEY": "sk-local",
            "O_HTTP_PORT": str(port),
            "O_API_KEY": API_KEY,
            "O_LOG_LEVEL": "WARNING",
            KEY_ENV: data_folder_key(Path(tmp)),
            **(service_env or {}),
        }
        if specs is None:
            counts = replicas or {}
            specs = [
                ServiceSpec.module(
                    s,
                    f"o_{s}",
                    {"O_HTTP_REUSE_PORT": "1"} if s == "gateway" and counts.get(s, 1) > 1 else {},
                    counts.get(s, 1),
                )
                for s in services
            ]
        supervised = with_identities(specs, servers.nats.seed_file)
        if restart_after is None:
            supervisor = Supervisor(supervised, env)
        else:
            # Never "stable", so never restarted at once: the same delay after every exit.
            supervisor = Supervisor(
                supervised,
                env,
                backoff_initial=restart_after,
                backoff_max=restart_after,
                stable_after=float("inf"),
            )
        await supervisor.start()
        base_url = f"http://127.0.0.1:{port}"
        try:
            async with httpx.AsyncClient(
                base_url=base_url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=120
            ) as http:
                await wait_healthy(http)
                yield LocalSystem(base_url, http, supervisor, servers)
        finally:
            await supervisor.stop()
