"""How a process's environment turns TLS to NATS on, and what a bad setting does at start."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from o_devtools.certs import make_certificates
from o_runtime.env import BadSetting, Env
from o_runtime.nats_identity import Identity
from o_runtime.nats_tls import NatsTls, TlsMisconfigured
from o_runtime.settings import Settings


def test_without_tls_settings_or_a_tls_url_connections_stay_plain() -> None:
    assert NatsTls.from_env({"NATS_URL": "nats://127.0.0.1:4222"}) is None
    assert "tls" not in Identity.of("gateway", {}).options()


def test_a_ca_turns_tls_on_with_the_handshake_first_and_server_verification(
    tmp_path: Path,
) -> None:
    certs = make_certificates(tmp_path)
    tls = NatsTls.from_env({"O_NATS_TLS_CA": str(certs.ca)})
    assert tls is not None
    options = tls.options()
    assert options["tls_handshake_first"] is True
    context = options["tls"]
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    # The CA the file names is the one the context trusts.
    [trusted] = context.get_ca_certs()
    assert dict(x[0] for x in trusted["subject"])["commonName"] == "O test CA"


def test_a_tls_url_alone_uses_the_systems_trust_store() -> None:
    tls = NatsTls.from_env({"NATS_URL": "tls://nats.example.com:4222"})
    assert tls is not None and tls.ca_file is None and tls.cert_file is None


def test_the_identity_carries_tls_to_nats_py_and_to_faststreams_broker(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path)
    environ = {
        "O_NATS_TLS_CA": str(certs.ca),
        "O_NATS_TLS_CERT": str(certs.client.cert),
        "O_NATS_TLS_KEY": str(certs.client.key),
    }
    identity = Identity.of("executor", environ)
    assert identity.tls is not None
    assert identity.options()["tls"] is identity.tls.context
    assert identity.options()["inbox_prefix"] == "_INBOX.executor"
    broker = identity.broker_options()
    assert "tls" not in broker
    assert broker["security"].ssl_context is identity.tls.context
    assert broker["security"].tls_handshake_first is True


def test_handshake_first_can_be_turned_off_for_an_older_server(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path)
    tls = NatsTls.from_env({"O_NATS_TLS_CA": str(certs.ca), "O_NATS_TLS_FIRST": "0"})
    assert tls is not None and tls.options()["tls_handshake_first"] is False
    with pytest.raises(TlsMisconfigured, match="O_NATS_TLS_FIRST must be 1 or 0"):
        NatsTls.from_env({"O_NATS_TLS_CA": str(certs.ca), "O_NATS_TLS_FIRST": "maybe"})


def test_a_certificate_without_its_key_is_refused(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path)
    with pytest.raises(TlsMisconfigured, match="O_NATS_TLS_CERT and O_NATS_TLS_KEY go together"):
        NatsTls.from_env({"O_NATS_TLS_CERT": str(certs.client.cert)})


def test_a_missing_ca_file_stops_the_service_at_start_naming_the_variable(
    tmp_path: Path,
) -> None:
    environ = {
        "NATS_URL": "tls://nats:4222",
        "DATABASE_URL": "postgresql://o@db/o",
        "O_NATS_TLS_CA": str(tmp_path / "missing.crt"),
    }
    with pytest.raises(BadSetting, match=r"O_NATS_TLS_CA=.*missing\.crt: not a usable CA file"):
        Settings.from_env("gateway", True, Env(environ))


def test_a_key_that_does_not_match_its_certificate_is_refused(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path)
    with pytest.raises(TlsMisconfigured, match="not a usable certificate and key"):
        NatsTls(ca_file=certs.ca, cert_file=certs.client.cert, key_file=certs.server.key)
