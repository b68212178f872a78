"""TLS on for NATS and Postgres: the services' code paths with certificates made by the test.

A system of its own (not the session's shared one): a CA, a server certificate for
127.0.0.1/localhost and a client certificate (o_devtools/certs.py); nats-server with a `tls`
block that verifies clients and wants the handshake first; Postgres reached only over TLS
(o_devtools/embedded_tls.py; the embedded build has no SSL of its own, so a TLS front does
the server's side: pg_tls_front.py). The five services are told only what a deployment tells
them: `O_NATS_TLS_CA`/`_CERT`/`_KEY` and a DATABASE_URL with `sslmode=verify-full` and
`sslrootcert`. Then the e2e round trip, and the refusals.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import subprocess
import tempfile
import threading
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import nats
import pytest

from o_devtools.certs import Certificates, make_certificates
from o_devtools.embedded import EmbeddedServers
from o_devtools.embedded_tls import TlsNats, TlsPostgres, client_env, start_tls_servers
from o_devtools.health import wait_healthy
from o_devtools.supervisor import DEFAULT_SERVICES, ServiceSpec, Supervisor, with_identities
from o_runtime.nats_identity import NKEY_ENV, Identity
from o_runtime.nats_tls import NatsTls
from tests.e2e.conftest import SECRETS_KEY, free_port
from tests.e2e.ops_support import o_ops
from tests.e2e.support import until
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
API_KEY = "tls-key"
HEALTH_SERVED = ("executor", "memory", "tool_sandbox", "evolution")


@dataclass
class TlsSystem:
    http: httpx.AsyncClient
    llm: FakeOpenAI
    servers: EmbeddedServers
    certs: Certificates
    supervisor: Supervisor
    health: dict[str, str]
    # Another CA, which signed nothing these servers hold.
    stranger: Certificates
    # What the services were started with.
    env: dict[str, str]

    @property
    def nats(self) -> TlsNats:
        assert isinstance(self.servers.nats, TlsNats)
        return self.servers.nats

    @property
    def postgres(self) -> TlsPostgres:
        assert isinstance(self.servers.postgres, TlsPostgres)
        return self.servers.postgres

    def identity(self, role: str, tls: NatsTls | None) -> Identity:
        return Identity.from_file(role, self.nats.seed_file(role)).with_tls(tls)


@pytest.fixture(scope="module")
async def tls_system() -> AsyncIterator[TlsSystem]:
    llm = FakeOpenAI()
    llm.start()
    # Not under pytest's tmp_path (test_observability.py says why).
    with (
        tempfile.TemporaryDirectory(prefix="o-tls-") as base,
        start_tls_servers(Path(base), make_certificates(Path(base) / "certs")) as servers,
    ):
        assert isinstance(servers.nats, TlsNats) and isinstance(servers.postgres, TlsPostgres)
        certs = servers.nats.certs
        stranger = make_certificates(Path(base) / "stranger", ca_name="Someone else's CA")
        port = free_port()
        inherited = {
            k: v for k, v in os.environ.items() if k != NKEY_ENV and not k.startswith("O_NATS_")
        }
        env = {
            **inherited,
            "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("contracts", "services", ".")),
            "NATS_URL": servers.nats.url,
            "DATABASE_URL": servers.postgres.url,
            **client_env(certs),
            "OPENAI_BASE_URL": llm.base_url,
            "OPENAI_API_KEY": "sk-test",
            "O_HTTP_PORT": str(port),
            "O_API_KEY": API_KEY,
            "O_LOG_LEVEL": "WARNING",
            "O_SECRETS_KEY": SECRETS_KEY,
        }
        ports = {name: free_port() for name in HEALTH_SERVED}
        supervisor = Supervisor(
            with_identities(
                [
                    ServiceSpec.module(
                        s, f"o_{s}", env={"O_HEALTH_PORT": str(ports[s])} if s in ports else None
                    )
                    for s in DEFAULT_SERVICES
                ],
                servers.nats.seed_file,
            ),
            env,
            backoff_initial=0.2,
        )
        await supervisor.start()
        http = httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {API_KEY}"},
            timeout=60,
        )
        try:
            await wait_healthy(http)
            health = {name: f"http://127.0.0.1:{p}" for name, p in ports.items()}
            yield TlsSystem(http, llm, servers, certs, supervisor, health, stranger, env)
        finally:
            await http.aclose()
            await supervisor.stop()
            llm.stop()


async def test_the_message_round_trip_passes_with_tls_on_for_nats_and_postgres(
    tls_system: TlsSystem,
) -> None:
    http, llm = tls_system.http, tls_system.llm
    created = await http.post(
        "/v1/agents/",
        json={
            "model": "openai/gpt-4o-mini",
            "memory_blocks": [{"label": "human", "value": "Name: Sam"}],
        },
    )
    assert created.status_code == 200, created.text
    agent_id = created.json()["id"]
    # A step through the memory service (executor -> memory over NATS), then the answer.
    llm.push(
        Reply(tool_calls=[("memory_insert", {"label": "human", "new_string": "Likes: tea"})]),
        Reply(content="Noted, Sam."),
    )
    sent = await http.post(
        f"/v1/agents/{agent_id}/messages",
        json={"messages": [{"role": "user", "content": "I like tea"}]},
    )
    assert sent.status_code == 200, sent.text
    result = sent.json()
    assert [m["message_type"] for m in result["messages"]] == [
        "tool_call_message",
        "tool_return_message",
        "assistant_message",
    ]
    assert result["messages"][-1]["content"] == "Noted, Sam."
    assert result["stop_reason"]["stop_reason"] == "end_turn"
    # Read back from the projections (Postgres over TLS).
    history = (await http.get(f"/v1/agents/{agent_id}/messages")).json()
    said = [(m["message_type"], m["content"]) for m in history if "content" in m]
    assert said[-2:] == [("user_message", "I like tea"), ("assistant_message", "Noted, Sam.")] or (
        ("user_message", "I like tea") in said and said[-1] == ("assistant_message", "Noted, Sam.")
    )
    block = (await http.get(f"/v1/agents/{agent_id}/core-memory/blocks/human")).json()
    assert block["value"] == "Name: Sam\nLikes: tea"
    # Every service got in (the servers let nothing else in) and stayed up.
    async with httpx.AsyncClient(timeout=10) as probe:
        for name, url in tls_system.health.items():
            assert (await probe.get(f"{url}/readyz")).status_code == 200, name
    for name in DEFAULT_SERVICES:
        assert tls_system.supervisor.restart_count(name) == 0, name


async def test_nats_refuses_a_client_that_does_not_trust_its_ca(tls_system: TlsSystem) -> None:
    stranger = tls_system.stranger
    # The client's own certificate is fine; it is the server's it cannot verify.
    tls = NatsTls(
        ca_file=stranger.ca,
        cert_file=tls_system.certs.client.cert,
        key_file=tls_system.certs.client.key,
    )
    identity = tls_system.identity("operator", tls)
    with pytest.raises(ssl.SSLCertVerificationError):
        await nats.connect(
            tls_system.nats.url, allow_reconnect=False, connect_timeout=5, **identity.options()
        )


async def test_nats_refuses_a_client_without_a_certificate_of_its_ca(
    tls_system: TlsSystem,
) -> None:
    # It trusts the server, but shows no certificate (`verify: true`), then one another CA
    # signed: the server's alert ends the handshake either way.
    refusals = {None: "CERTIFICATE_REQUIRED", tls_system.stranger.client: "UNKNOWN_CA"}
    for cert, alert in refusals.items():
        tls = NatsTls(
            ca_file=tls_system.certs.ca,
            cert_file=cert.cert if cert else None,
            key_file=cert.key if cert else None,
        )
        identity = tls_system.identity("operator", tls)
        with pytest.raises(ssl.SSLError, match=alert):
            await nats.connect(
                tls_system.nats.url, allow_reconnect=False, connect_timeout=5, **identity.options()
            )


async def test_nats_refuses_a_plaintext_client(tls_system: TlsSystem) -> None:
    identity = tls_system.identity("operator", None)
    plain = tls_system.nats.url.replace("tls://", "nats://", 1)
    # The server waits for a TLS handshake: a plaintext client is never greeted (no INFO),
    # so it gives up (and the server drops it after its TLS timeout).
    with pytest.raises(TimeoutError):
        await nats.connect(plain, allow_reconnect=False, connect_timeout=2, **identity.options())


async def test_the_tls_clients_reach_nats_and_postgres(tls_system: TlsSystem) -> None:
    # The positive control for the refusals: the same calls with the right CA go through.
    nc = await nats.connect(
        tls_system.nats.url,
        allow_reconnect=False,
        connect_timeout=5,
        **tls_system.identity("operator", tls_system.nats.tls).options(),
    )
    try:
        await nc.flush(timeout=5)
        assert nc.is_connected
    finally:
        await nc.close()
    conn = await asyncpg.connect(tls_system.postgres.url, timeout=10)
    try:
        assert (
            await conn.fetchval("SELECT count(*) FROM pg_extension WHERE extname = 'vector'") == 1
        )
    finally:
        await conn.close()


async def test_the_operators_cli_connects_over_tls(tls_system: TlsSystem) -> None:
    """`python -m o_ops` as an operator runs it beside a TLS deployment: the operator's seed,
    the client certificate (`O_NATS_TLS_*`) and a verify-full DATABASE_URL."""
    env = {
        **tls_system.env,
        NKEY_ENV: str(tls_system.nats.seed_file("operator")),
        "O_URL": str(tls_system.http.base_url),
    }
    ran = await o_ops(env, "status", "--json")
    assert ran.code == 0, ran.err
    status = json.loads(ran.out)
    assert {p["service"] for p in status["services"]} >= set(DEFAULT_SERVICES)
    verified = await o_ops(env, "projections", "verify")
    assert verified.code == 0, verified.err + verified.out
    # Without the client certificate, or trusting another CA: refused, and it says why
    # (nats-py alone says only "no servers available").
    no_cert = {k: v for k, v in env.items() if k not in ("O_NATS_TLS_CERT", "O_NATS_TLS_KEY")}
    refused = await o_ops(no_cert, "status")
    assert refused.code == 1
    assert "certificate" in refused.err.lower(), refused.err
    stranger = {**env, "O_NATS_TLS_CA": str(tls_system.stranger.ca)}
    refused = await o_ops(stranger, "status")
    assert refused.code == 1
    assert "certificate verify failed" in refused.err.lower(), refused.err


async def test_postgres_refuses_a_client_that_does_not_trust_its_ca(
    tls_system: TlsSystem,
) -> None:
    dsn = tls_system.postgres.tls_url("o", ca=tls_system.stranger.ca)
    with pytest.raises(ssl.SSLCertVerificationError):
        await asyncpg.connect(dsn, timeout=10)


async def test_postgres_refuses_a_plaintext_client(tls_system: TlsSystem) -> None:
    dsn = tls_system.postgres.tls_url("o").split("?", 1)[0] + "?sslmode=disable"
    with pytest.raises(asyncpg.InvalidAuthorizationSpecificationError, match="over TLS only"):
        await asyncpg.connect(dsn, timeout=10)


async def answered_in_time(
    http: httpx.AsyncClient, agent_id: str, text: str, deadline: float = 60.0
) -> dict[str, Any]:
    """The message sent until it is answered, as a client does while O reconnects (5xx,
    connection refused): under one Idempotency-Key, so a try that got through runs once."""
    key = {"Idempotency-Key": f"tls-{uuid.uuid4().hex}"}
    body = {"messages": [{"role": "user", "content": text}]}
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while True:
        try:
            sent = await http.post(
                f"/v1/agents/{agent_id}/messages", json=body, headers=key, timeout=20
            )
            if sent.status_code == 200:
                result: dict[str, Any] = sent.json()
                return result
            assert sent.status_code >= 500, sent.text
            failure = f"{sent.status_code} {sent.text}"
        except httpx.TransportError as exc:
            failure = repr(exc)
        assert loop.time() < end, f"not answered in {deadline}s: {failure}"
        await asyncio.sleep(0.2)  # (a client's pause between tries)


async def killed(proc: subprocess.Popen[bytes] | None) -> None:
    assert proc is not None and proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    await asyncio.to_thread(proc.wait)


async def test_nats_and_postgres_killed_come_back_and_nothing_acknowledged_is_lost(
    tls_system: TlsSystem,
) -> None:
    """The deployment's configuration under a crash: nats-server and then Postgres die
    (SIGKILL) and start again; every service reconnects over TLS (the handshake first, the
    client certificate, verify-full), and what was acknowledged before each death is there
    once."""
    http, llm = tls_system.http, tls_system.llm
    llm.reset()
    created = await http.post(
        "/v1/agents/",
        json={"model": "openai/gpt-4o-mini", "memory_blocks": [{"label": "human", "value": ""}]},
    )
    assert created.status_code == 200, created.text
    agent_id = created.json()["id"]
    llm.push(
        Reply(tool_calls=[("memory_insert", {"label": "human", "new_string": "Likes: tea"})]),
        Reply(content="Noted."),
    )
    first = await answered_in_time(http, agent_id, "I like tea")
    assert first["messages"][-1]["content"] == "Noted."

    await killed(tls_system.nats.proc)
    await asyncio.to_thread(tls_system.nats.start)
    after_nats = await answered_in_time(http, agent_id, "after nats")
    assert after_nats["messages"][-1]["content"] == "echo: after nats"

    await killed(tls_system.postgres.proc)
    await asyncio.to_thread(tls_system.postgres.start)
    after_postgres = await answered_in_time(http, agent_id, "after postgres")
    assert after_postgres["messages"][-1]["content"] == "echo: after postgres"

    # NATS dies while a run waits for its model: the run finishes once all the same. (If
    # the answer could not be recorded while the executor reconnected, the run is taken up
    # again and the model asked again, as docs/agent-loop.md says: the same answer twice.)
    answering = threading.Event()
    llm.push(Reply(content="Held.", release=answering), Reply(content="Held."))
    asked = len(llm.requests)
    during = asyncio.create_task(answered_in_time(http, agent_id, "during"))
    try:
        await until(llm, lambda requests: len(requests) > asked)
        await killed(tls_system.nats.proc)
        await asyncio.to_thread(tls_system.nats.start)
    finally:
        answering.set()
    assert (await during)["messages"][-1]["content"] == "Held."
    assert len(llm.requests) - asked in (1, 2)
    llm.reset()  # (the second answer, if the model was asked once)

    history = (await http.get(f"/v1/agents/{agent_id}/messages", params={"limit": 100})).json()
    said = [m["content"] for m in history if m["message_type"] == "user_message"]
    assert said == ["I like tea", "after nats", "after postgres", "during"]
    answers = [m["content"] for m in history if m["message_type"] == "assistant_message"]
    assert answers == ["Noted.", "echo: after nats", "echo: after postgres", "Held."]
    block = (await http.get(f"/v1/agents/{agent_id}/core-memory/blocks/human")).json()
    assert block["value"].count("Likes: tea") == 1
    # Reconnected, not restarted.
    for name in DEFAULT_SERVICES:
        assert tls_system.supervisor.restart_count(name) == 0, name
