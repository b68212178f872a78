"""Where a running `make run` is, for the tools that connect to it (`<data>/endpoints.json`).

The supervisor writes the file once its embedded servers are up: the NATS and Postgres
addresses, the operator's NKEY seed file, and the client side of NATS' TLS when the servers
run with it. A tool (`python -m o_ops`, `make rebuild`, the chaos suite) connects with what
its environment says, and takes the rest from the file: so the same tool reaches a
deployment (everything in the environment) or the `make run` in `O_DATA_DIR` (nothing set).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from o_runtime.nats_identity import NKEY_ENV
from o_runtime.nats_tls import CA_ENV, CERT_ENV, FIRST_ENV, KEY_ENV

ENDPOINTS_FILE = "endpoints.json"
# How NATS is reached over TLS: the CA to trust, the client's certificate and key.
TLS_KEYS = (CA_ENV, CERT_ENV, KEY_ENV, FIRST_ENV)
# Everything a tool needs to connect, from its environment or the file.
KEYS = ("NATS_URL", "DATABASE_URL", NKEY_ENV, *TLS_KEYS)


def write_endpoints(base: Path, env: Mapping[str, str], operator: Path | None = None) -> None:
    """Where the running system is (`env`: the services' environment); with `operator`, the
    seed file tools connect with."""
    endpoints = {"NATS_URL": env["NATS_URL"], "DATABASE_URL": env["DATABASE_URL"]}
    endpoints |= {k: env[k] for k in TLS_KEYS if env.get(k)}
    if operator is not None:
        endpoints[NKEY_ENV] = str(operator)
    path = base / ENDPOINTS_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(endpoints))
    tmp.replace(path)


def read_endpoints(base: Path) -> dict[str, str]:
    try:
        data = json.loads((base / ENDPOINTS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {k: str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def tool_endpoints(base: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """What a tool connects with: its environment's settings, else the file's. NATS' TLS
    settings go together: from the environment if it sets any of them."""
    file = read_endpoints(base)
    own = {k: v for k in KEYS if (v := environ.get(k))}
    if any(k in own for k in TLS_KEYS):
        file = {k: v for k, v in file.items() if k not in TLS_KEYS}
    return file | own
