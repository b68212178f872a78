"""The operator's CLI: where it finds the system, its commands, and what it asks the API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from o_devtools.certs import make_certificates
from o_ops.__main__ import main, parser
from o_ops.agent_files import import_form
from o_ops.settings import NotConfigured, OpsSettings


def test_settings_come_from_make_runs_data_folder_unless_the_environment_names_them(
    tmp_path: Path,
) -> None:
    (tmp_path / "endpoints.json").write_text(
        json.dumps(
            {
                "NATS_URL": "nats://127.0.0.1:4333",
                "DATABASE_URL": "postgresql://o@/o",
                "O_NATS_NKEY": "/data/nats-auth/operator.nk",
            }
        )
    )
    found = OpsSettings.from_env({"O_DATA_DIR": str(tmp_path), "O_HTTP_PORT": "9000"})
    assert (found.nats_url, found.database_url, found.nkey_file, found.gateway_url) == (
        "nats://127.0.0.1:4333",
        "postgresql://o@/o",
        "/data/nats-auth/operator.nk",
        "http://127.0.0.1:9000",
    )
    named = OpsSettings.from_env(
        {
            "O_DATA_DIR": str(tmp_path),
            "NATS_URL": "nats://elsewhere:4222",
            "O_URL": "https://o.example/",
            "O_API_KEY": "k",
        }
    )
    assert (named.nats_url, named.gateway_url, named.api_key) == (
        "nats://elsewhere:4222",
        "https://o.example",
        "k",
    )


def test_nats_tls_comes_from_the_environment_or_the_data_folder_never_half_of_each(
    tmp_path: Path,
) -> None:
    certs = make_certificates(tmp_path / "certs")
    other = make_certificates(tmp_path / "other", ca_name="Another CA")
    (tmp_path / "endpoints.json").write_text(
        json.dumps(
            {
                "NATS_URL": "tls://127.0.0.1:4333",
                "O_NATS_TLS_CA": str(certs.ca),
                "O_NATS_TLS_CERT": str(certs.client.cert),
                "O_NATS_TLS_KEY": str(certs.client.key),
            }
        )
    )
    base = {"O_DATA_DIR": str(tmp_path)}
    _, from_file = OpsSettings.from_env(base).nats()
    assert from_file.tls is not None
    assert (from_file.tls.ca_file, from_file.tls.cert_file) == (certs.ca, certs.client.cert)
    # The environment's CA alone (a server-only TLS): not the file's client certificate.
    _, own = OpsSettings.from_env(base | {"O_NATS_TLS_CA": str(other.ca)}).nats()
    assert own.tls is not None
    assert (own.tls.ca_file, own.tls.cert_file) == (other.ca, None)
    # An unusable file is a setting's error (exit 2), named.
    broken = OpsSettings.from_env(base | {"O_NATS_TLS_CA": str(tmp_path / "missing.pem")})
    with pytest.raises(NotConfigured, match="O_NATS_TLS_CA"):
        broken.nats()
    # Plain TCP when neither says TLS.
    (tmp_path / "endpoints.json").write_text(json.dumps({"NATS_URL": "nats://127.0.0.1:4333"}))
    _, plain = OpsSettings.from_env(base).nats()
    assert plain.tls is None


def test_a_missing_server_is_said_before_anything_is_tried(tmp_path: Path) -> None:
    nothing = OpsSettings.from_env({"O_DATA_DIR": str(tmp_path)})
    with pytest.raises(NotConfigured):
        nothing.nats()
    with pytest.raises(NotConfigured):
        nothing.database()


def test_every_command_group_is_there_and_a_missing_setting_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (
        ["status", "--json"],
        ["dead-letters", "redrive", "7", "--timeout", "5"],
        ["projections", "verify", "runs"],
        ["agents", "import", "a.af", "--name", "x"],
        ["backup", "/tmp/b"],
        ["restore", "/tmp/b", "--no-rebuild"],
    ):
        assert callable(parser().parse_args(argv).run)
    for name in ("NATS_URL", "DATABASE_URL", "O_NATS_NKEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("O_DATA_DIR", str(tmp_path))
    assert main(["dead-letters", "list"]) == 2
    assert "NATS_URL is not set" in capsys.readouterr().err


def test_an_import_asks_for_what_the_options_say_in_lettas_form_fields() -> None:
    args = parser().parse_args(
        [
            "agents",
            "import",
            "a.af",
            "--name",
            "Sam",
            "--model",
            "openai/gpt-4o",
            "--strip-messages",
        ]
    )
    assert import_form(args) == {
        "append_copy_suffix": "true",
        "override_name": "Sam",
        "override_model_handle": "openai/gpt-4o",
        "strip_messages": "true",
    }
    plain = parser().parse_args(["agents", "import", "a.af", "--no-copy-suffix"])
    assert import_form(plain) == {"append_copy_suffix": "false"}
