"""Where the operator's tool finds the system, and who it is there.

As `make rebuild` does: `NATS_URL`, `DATABASE_URL`, `O_NATS_NKEY` (the operator's NKEY
seed file) and NATS' TLS (`O_NATS_TLS_*`, as the services take them) when set; otherwise what
a running `make run` wrote in its data folder (`<O_DATA_DIR>/endpoints.json`,
o_devtools/endpoints.py). The HTTP API (agent files) is `O_URL`, or the gateway
`make run` starts (`O_HTTP_HOST`:`O_HTTP_PORT`, default 127.0.0.1:8283), with `O_API_KEY`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from o_devtools.endpoints import TLS_KEYS, tool_endpoints
from o_runtime.nats_identity import NKEY_ENV, Identity
from o_runtime.nats_tls import NatsTls, TlsMisconfigured


class NotConfigured(Exception):
    """A setting the command needs is missing (exit status 2)."""


@dataclass(frozen=True)
class OpsSettings:
    nats_url: str | None
    database_url: str | None
    # The operator's seed file (None: none given: the server will refuse the connection).
    nkey_file: str | None
    gateway_url: str
    api_key: str | None = field(default=None, repr=False)
    # NATS' TLS (`O_NATS_TLS_*`: a deployment's CA and the operator's client certificate);
    # None: plain TCP. Read when a command connects: a bad file is that command's error.
    nats_tls_env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> OpsSettings:
        base = Path(environ.get("O_DATA_DIR") or "data").resolve()
        endpoints = tool_endpoints(base, environ)
        host = environ.get("O_HTTP_HOST", "127.0.0.1")
        port = environ.get("O_HTTP_PORT", "8283")
        return cls(
            nats_url=endpoints.get("NATS_URL"),
            database_url=endpoints.get("DATABASE_URL"),
            nkey_file=endpoints.get(NKEY_ENV),
            nats_tls_env={k: v for k, v in endpoints.items() if k in TLS_KEYS},
            gateway_url=(environ.get("O_URL") or f"http://{host}:{port}").rstrip("/"),
            api_key=environ.get("O_API_KEY") or None,
        )

    def nats(self) -> tuple[str, Identity]:
        if not self.nats_url:
            raise NotConfigured(
                "NATS_URL is not set and no running `make run` was found in O_DATA_DIR"
            )
        try:
            tls = NatsTls.from_env(self.nats_tls_env)
        except TlsMisconfigured as exc:
            raise NotConfigured(str(exc)) from None
        operator = Identity.of("operator", {NKEY_ENV: self.nkey_file or ""})
        return self.nats_url, operator.with_tls(tls)

    def database(self) -> str:
        if not self.database_url:
            raise NotConfigured(
                "DATABASE_URL is not set and no running `make run` was found in O_DATA_DIR"
            )
        return self.database_url
