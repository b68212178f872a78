"""Where `make run` is for the tools, and the embedded servers it starts with TLS asked for."""

from __future__ import annotations

import json
from pathlib import Path

from o_devtools.embedded import EmbeddedNats, EmbeddedPostgres
from o_devtools.embedded_tls import TlsNats, TlsPostgres
from o_devtools.endpoints import read_endpoints, tool_endpoints, write_endpoints
from o_devtools.supervisor import EMBEDDED_TLS_ENV, embedded_servers
from o_runtime.nats_identity import NKEY_ENV
from o_runtime.nats_tls import CA_ENV, CERT_ENV, KEY_ENV, NatsTls


def test_the_file_names_the_servers_the_operators_seed_and_natss_tls(tmp_path: Path) -> None:
    services = {
        "NATS_URL": "tls://127.0.0.1:4333",
        "DATABASE_URL": "postgresql://o@127.0.0.1:5432/o?sslmode=verify-full",
        CA_ENV: "/data/certs/ca.crt",
        CERT_ENV: "/data/certs/client.crt",
        KEY_ENV: "/data/certs/client.key",
        "OPENAI_API_KEY": "sk-never-written",
    }
    write_endpoints(tmp_path, services, tmp_path / "operator.nk")
    written = json.loads((tmp_path / "endpoints.json").read_text())
    assert written == {k: v for k, v in services.items() if k != "OPENAI_API_KEY"} | {
        NKEY_ENV: str(tmp_path / "operator.nk")
    }
    assert read_endpoints(tmp_path) == written
    # A plain system: no TLS keys at all.
    write_endpoints(tmp_path, {"NATS_URL": "nats://127.0.0.1:1", "DATABASE_URL": "postgresql:///o"})
    assert set(read_endpoints(tmp_path)) == {"NATS_URL", "DATABASE_URL"}


def test_a_tool_takes_its_environment_first_and_natss_tls_whole(tmp_path: Path) -> None:
    write_endpoints(
        tmp_path,
        {
            "NATS_URL": "tls://127.0.0.1:4333",
            "DATABASE_URL": "postgresql:///o",
            CA_ENV: "/data/ca.crt",
            CERT_ENV: "/data/client.crt",
            KEY_ENV: "/data/client.key",
        },
        tmp_path / "operator.nk",
    )
    assert tool_endpoints(tmp_path, {})[CERT_ENV] == "/data/client.crt"
    mine = tool_endpoints(tmp_path, {"NATS_URL": "tls://nats.example:4222", CA_ENV: "/mine/ca"})
    assert mine["NATS_URL"] == "tls://nats.example:4222"
    assert mine["DATABASE_URL"] == "postgresql:///o"
    assert (mine[CA_ENV], CERT_ENV in mine, KEY_ENV in mine) == ("/mine/ca", False, False)
    assert tool_endpoints(tmp_path / "nowhere", {}) == {}


def test_make_run_starts_plain_servers_unless_tls_is_asked_for(tmp_path: Path) -> None:
    nats, postgres, env = embedded_servers({}, tmp_path / "plain")
    assert type(nats) is EmbeddedNats and type(postgres) is EmbeddedPostgres and env == {}

    nats, postgres, env = embedded_servers({EMBEDDED_TLS_ENV: "1"}, tmp_path / "tls")
    assert isinstance(nats, TlsNats) and isinstance(postgres, TlsPostgres)
    assert "tls {" in nats.extra_config() and "verify: true" in nats.extra_config()
    # The services get the CA and a client certificate the servers' CA signed.
    tls = NatsTls.from_env(env)
    assert tls is not None and tls.cert_file is not None
    assert tls.ca_file == nats.certs.ca and tls.cert_file.exists()
    assert tls.context.verify_mode.name == "CERT_REQUIRED"

    # Servers elsewhere (a deployment's): none started here, and nothing to add.
    assert embedded_servers(
        {EMBEDDED_TLS_ENV: "1", "NATS_URL": "tls://n:4222", "DATABASE_URL": "postgresql://p/o"},
        tmp_path / "elsewhere",
    ) == (None, None, {})
