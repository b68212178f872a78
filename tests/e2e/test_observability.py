"""What an operator sees of a running system: one trace per user message across the services
(received by a stand-in OTLP collector), Prometheus metrics that count what was done, and
readiness that follows Postgres and the projections while liveness does not.

The system here is a module of its own (its own NATS, Postgres and five services, with the
OTLP variables set and a health port per service): the session's e2e system has a fixed
environment, and this module stops its Postgres.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import nats
import pytest
from prometheus_client.parser import text_string_to_metric_families

from o_devtools.embedded import EmbeddedServers, start_servers
from o_devtools.health import wait_healthy
from o_devtools.supervisor import DEFAULT_SERVICES, ServiceSpec, Supervisor, with_identities
from o_runtime.nats_identity import NKEY_ENV, Identity
from o_setup import apply_topology
from tests.e2e.conftest import SECRETS_KEY, free_port
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.otlp_collector import OtlpCollector, ReceivedPoint, ReceivedSpan

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
API_KEY = "observed"
# Services without an HTTP API of their own answer health and metrics on a port each.
HEALTH_SERVED = ("executor", "memory", "tool_sandbox", "evolution")
# Readiness fails once a projection leaves an event unapplied this long (seconds).
READY_LAG = 2.0
DEADLINE = 60.0

WEATHER = '''
def weather_now(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: The city to look up.
    """
    return f"Sunny in {city}"
'''


@dataclass
class Observed:
    http: httpx.AsyncClient
    llm: FakeOpenAI
    collector: OtlpCollector
    servers: EmbeddedServers
    env: dict[str, str]
    # Where each service answers /healthz, /readyz and /metrics (the gateway: its API).
    health: dict[str, str]


@pytest.fixture(scope="module")
def collector() -> Iterator[OtlpCollector]:
    c = OtlpCollector()
    c.start(grpc_too=False)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def fake_llm_here() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
async def observed(collector: OtlpCollector, fake_llm_here: FakeOpenAI) -> AsyncIterator[Observed]:
    # Not under pytest's tmp_path: another pytest session starting meanwhile makes
    # /tmp/pytest-of-<user> private again, and Postgres (its own user) could then not open
    # its files when this module restarts it.
    with (
        tempfile.TemporaryDirectory(prefix="o-observed-") as base,
        start_servers(Path(base)) as servers,
    ):
        assert servers.nats is not None and servers.postgres is not None
        port = free_port()
        # (Not this pytest process's NATS identity: these servers have keys of their own.)
        inherited = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("OTEL_", "O_TRACE")) and k != NKEY_ENV
        }
        env = {
            **inherited,
            "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("contracts", "services", ".")),
            "NATS_URL": servers.nats.url,
            "DATABASE_URL": servers.postgres.url,
            "OPENAI_BASE_URL": fake_llm_here.base_url,
            "OPENAI_API_KEY": "sk-test",
            "O_HTTP_PORT": str(port),
            "O_API_KEY": API_KEY,
            "O_LOG_LEVEL": "WARNING",
            "O_SECRETS_KEY": SECRETS_KEY,
            # Traces and metrics to the collector, over OTLP/HTTP, batched briefly.
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.http_endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_METRIC_EXPORT_INTERVAL": "500",
            "O_READY_MAX_PROJECTION_LAG": str(READY_LAG),
        }
        credentials = servers.nats.credentials
        await apply_topology(servers.nats.url, identity(servers, "setup"), env)
        ports = {name: free_port() for name in HEALTH_SERVED}
        supervisor = Supervisor(
            with_identities(
                [
                    ServiceSpec.module(
                        s, f"o_{s}", env={"O_HEALTH_PORT": str(ports[s])} if s in ports else None
                    )
                    for s in DEFAULT_SERVICES
                ],
                credentials.seed_file,
            ),
            env,
            backoff_initial=0.2,
        )
        await supervisor.start()
        health = {name: f"http://127.0.0.1:{p}" for name, p in ports.items()}
        health["gateway"] = f"http://127.0.0.1:{port}"
        http = httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {API_KEY}"},
            timeout=60,
        )
        try:
            await wait_healthy(http)
            yield Observed(http, fake_llm_here, collector, servers, env, health)
        finally:
            await http.aclose()
            await supervisor.stop()


# -- helpers ------------------------------------------------------------------------------


def identity(servers: EmbeddedServers, role: str) -> Identity:
    """A NATS identity of this module's own servers (not the session's)."""
    assert servers.nats is not None
    return Identity.from_file(role, servers.nats.credentials.seed_file(role))


async def new_agent(observed: Observed, **extra: Any) -> dict[str, Any]:
    body = {
        "model": "openai/gpt-4o-mini",
        "memory_blocks": [{"label": "human", "value": "Name: Sam"}],
        **extra,
    }
    response = await observed.http.post("/v1/agents/", json=body)
    assert response.status_code == 200, response.text
    agent: dict[str, Any] = response.json()
    return agent


async def weather_agent(observed: Observed, tool_name: str) -> dict[str, Any]:
    """An agent with a user tool (run in the sandbox) named `tool_name`."""
    source = WEATHER.replace("weather_now", tool_name)
    tool = await observed.http.post("/v1/tools/", json={"source_code": source})
    assert tool.status_code == 200, tool.text
    return await new_agent(observed, tool_ids=[tool.json()["id"]])


async def send(
    observed: Observed, agent_id: str, text: str, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    response = await observed.http.post(
        f"/v1/agents/{agent_id}/messages",
        json={"messages": [{"role": "user", "content": text}]},
        headers=headers,
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def health_path(service: str, what: str) -> str:
    """`what`: live, ready or metrics."""
    if service == "gateway":
        return {"live": "/v1/health/live", "ready": "/v1/health/ready", "metrics": "/metrics"}[what]
    return {"live": "/healthz", "ready": "/readyz", "metrics": "/metrics"}[what]


async def ask(observed: Observed, service: str, what: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=observed.health[service], timeout=10) as client:
        return await client.get(health_path(service, what))


async def eventually(
    observed: Observed, service: str, what: str, wanted: Callable[[httpx.Response], bool]
) -> httpx.Response:
    """The service's first answer that is `wanted` (polled: readiness is a state, not an
    event; a service restarting meanwhile is asked again)."""
    async with asyncio.timeout(DEADLINE):
        while True:
            try:
                response = await ask(observed, service, what)
                if wanted(response):
                    return response
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)


Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(observed: Observed, service: str) -> Series:
    response = await ask(observed, service, "metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return parsed(response.text)


def parsed(text: str) -> Series:
    """Prometheus' text format as {(name, labels): value}, OpenTelemetry's scope labels aside."""
    series: Series = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = {k: v for k, v in sample.labels.items() if not k.startswith("otel_scope")}
            series[(sample.name, frozenset(labels.items()))] = sample.value
    return series


def value(series: Series, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in series.items() if n == name and wanted <= ls)


def traced(collector: OtlpCollector, trace_id: str) -> list[ReceivedSpan]:
    return [s for s in collector.spans if s.trace_id == trace_id]


def only(spans: list[ReceivedSpan], name: str, service: str) -> ReceivedSpan:
    found = [s for s in spans if s.name == name and s.service == service]
    assert len(found) == 1, (name, service, [(s.name, s.service) for s in spans])
    return found[0]


# -- traces -------------------------------------------------------------------------------


async def test_one_user_message_is_one_trace_across_the_services(observed: Observed) -> None:
    agent = await weather_agent(observed, "weather_now")
    observed.llm.push(
        Reply(
            tool_calls=[("memory_insert", {"label": "human", "new_string": "Likes tea."})],
            prompt_tokens=101,
            completion_tokens=11,
        ),
        Reply(
            tool_calls=[("weather_now", {"city": "Paris"})], prompt_tokens=102, completion_tokens=12
        ),
        Reply(content="Sunny in Paris.", prompt_tokens=103, completion_tokens=13),
    )
    # The caller's own trace: the gateway continues it.
    trace_id, caller_span = secrets.token_hex(16), secrets.token_hex(8)
    result = await send(
        observed,
        agent["id"],
        "Remember I like tea; weather in Paris?",
        headers={"traceparent": f"00-{trace_id}-{caller_span}-01"},
    )
    assert result["stop_reason"]["stop_reason"] == "end_turn"

    everywhere = {"o-gateway", "o-executor", "o-memory", "o-tool_sandbox", "o-evolution"}

    def whole(c: OtlpCollector) -> list[ReceivedSpan] | None:
        spans = traced(c, trace_id)
        names = {s.name for s in spans}
        complete = {
            "POST /v1/agents/{agent_id}/messages",
            "executor StartRun",
            "chat gpt-4o-mini",
            "execute_tool memory_insert",
            "execute_tool weather_now",
            "memory RunMemoryTool",
            "tool_sandbox RunTool",
            "project runs",
            "project memory",
            "evolution-turns RunCompleted",
        } <= names and sum(s.name == "chat gpt-4o-mini" for s in spans) == 3
        return spans if complete and {s.service for s in spans} == everywhere else None

    spans = observed.collector.wait_for(whole)

    request = only(spans, "POST /v1/agents/{agent_id}/messages", "o-gateway")
    assert request.parent_span_id == caller_span
    assert request.attributes == {
        "http.request.method": "POST",
        "url.path": f"/v1/agents/{agent['id']}/messages",
        "http.route": "/v1/agents/{agent_id}/messages",
        "http.response.status_code": 200,
    }
    run = only(spans, "executor StartRun", "o-executor")
    assert run.parent_span_id == request.span_id

    calls = sorted(
        (s for s in spans if s.name == "chat gpt-4o-mini"),
        key=lambda s: s.attributes["gen_ai.usage.input_tokens"],
    )
    assert [s.parent_span_id for s in calls] == [run.span_id] * 3
    assert [
        (s.attributes["gen_ai.usage.input_tokens"], s.attributes["gen_ai.usage.output_tokens"])
        for s in calls
    ] == [(101, 11), (102, 12), (103, 13)]
    for call in calls:
        assert call.service == "o-executor"
        named = ("gen_ai.operation.name", "gen_ai.request.model", "gen_ai.provider.name")
        assert [call.attributes[k] for k in named] == ["chat", "gpt-4o-mini", "openai"]
        assert call.attributes["gen_ai.system"] == "openai"
        # The conventions' attributes only: never the prompt or the answer.
        assert set(call.attributes) == {
            *named,
            "gen_ai.system",
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.output_tokens",
            "gen_ai.response.finish_reasons",
        }

    memory_tool = only(spans, "execute_tool memory_insert", "o-executor")
    assert memory_tool.parent_span_id == run.span_id
    assert memory_tool.attributes["gen_ai.tool.name"] == "memory_insert"
    assert memory_tool.attributes["gen_ai.operation.name"] == "execute_tool"
    weather_tool = only(spans, "execute_tool weather_now", "o-executor")
    # The memory service and the sandbox work inside the tool calls that asked them.
    edit = only(spans, "memory RunMemoryTool", "o-memory")
    assert edit.parent_span_id == memory_tool.span_id
    assert only(spans, "tool_sandbox RunTool", "o-tool_sandbox").parent_span_id == (
        weather_tool.span_id
    )
    # Projections apply the run's events inside the same trace; the block's edit too.
    assert any(s.name == "project runs" and s.service == "o-executor" for s in spans)
    assert any(s.name == "project memory" and s.service == "o-memory" for s in spans)
    # The evolution service reacts to the run's end within the trace.
    assert only(spans, "evolution-turns RunCompleted", "o-evolution").trace_id == trace_id


# -- metrics ------------------------------------------------------------------------------


async def test_metrics_count_what_was_done(observed: Observed) -> None:
    services = ("gateway", *HEALTH_SERVED)
    before = {s: await scrape(observed, s) for s in services}
    agent = await weather_agent(observed, "weather_later")
    observed.llm.push(
        Reply(
            tool_calls=[("weather_later", {"city": "Oslo"})], prompt_tokens=40, completion_tokens=4
        ),
        Reply(content="Sunny in Oslo.", prompt_tokens=50, completion_tokens=5),
    )
    result = await send(observed, agent["id"], "Weather in Oslo?")
    assert result["stop_reason"]["stop_reason"] == "end_turn"
    # A command nobody can read is dead-lettered by the memory service.
    nc = await nats.connect(
        observed.env["NATS_URL"], **identity(observed.servers, "operator").options()
    )
    try:
        await nc.jetstream().publish(
            f"o.cmd.memory.{uuid.uuid4()}",
            b"\xc1 not msgpack",
            headers={"Nats-Msg-Id": str(uuid.uuid4())},
        )
    finally:
        await nc.close()
    # An evolution decision.
    configured = await observed.http.put(
        f"/v1/agents/{agent['id']}/evolution/config", json={"enabled": True}
    )
    assert configured.status_code == 200, configured.text
    dead = value(before["memory"], "o_dead_letters_total", consumer="memory") + 1

    await eventually(
        observed,
        "memory",
        "metrics",
        lambda r: value(parsed(r.text), "o_dead_letters_total", consumer="memory") >= dead,
    )
    after = {s: await scrape(observed, s) for s in services}

    def grew(service: str, name: str, **labels: str) -> float:
        return value(after[service], name, **labels) - value(before[service], name, **labels)

    model = {"gen_ai_provider_name": "openai", "gen_ai_request_model": "gpt-4o-mini"}
    # The executor: one run ended with end_turn, two steps, two LLM calls and their tokens.
    assert grew("executor", "o_runs_completed_total", stop_reason="end_turn") == 1
    assert grew("executor", "o_run_duration_seconds_count", stop_reason="end_turn") == 1
    assert grew("executor", "o_agent_step_duration_seconds_count", **model) == 2
    assert grew("executor", "gen_ai_client_operation_duration_seconds_count", **model) == 2
    assert grew("executor", "o_llm_tokens_total", gen_ai_token_type="input", **model) == 90
    assert grew("executor", "o_llm_tokens_total", gen_ai_token_type="output", **model) == 9
    assert grew("executor", "o_llm_errors_total") == 0
    assert (
        grew(
            "executor",
            "o_command_duration_seconds_count",
            consumer="executor",
            command="StartRun",
            outcome="ok",
        )
        == 1
    )
    # The queue's gauges are samples (every 10 s, reused for 1 s): one taken while the run's
    # command was held reads it pending a while after the run.
    await eventually(
        observed,
        "executor",
        "metrics",
        lambda r: all(
            value(parsed(r.text), gauge, consumer="executor") == 0
            for gauge in ("o_queue_pending", "o_queue_ack_pending")
        ),
    )
    assert grew("executor", "o_projection_events_total", projection="runs") > 0
    lags = [v for (n, ls), v in after["executor"].items() if n == "o_projection_lag_seconds"]
    assert len(lags) == 1 and 0 <= lags[0] <= READY_LAG
    # The gateway: the request by its route template.
    assert (
        grew(
            "gateway",
            "http_server_request_duration_seconds_count",
            http_route="/v1/agents/{agent_id}/messages",
            http_request_method="POST",
            http_response_status_code="200",
        )
        == 1
    )
    # The sandbox ran the tool once; its pool is back to idle.
    assert grew("tool_sandbox", "o_sandbox_executions_total", outcome="success") == 1
    assert grew("tool_sandbox", "o_sandbox_execution_duration_seconds_count") == 1
    assert value(after["tool_sandbox"], "o_sandbox_workers", state="busy") == 0
    assert value(after["tool_sandbox"], "o_sandbox_pool_size") == 4
    # Dead letters: counted where they happened, and kept in the stream (the gateway samples).
    assert grew("memory", "o_dead_letters_total", consumer="memory") == 1
    # (A gauge sampled at most once a second: asked until the sample includes it.)
    kept = value(before["gateway"], "o_dead_letters_stored", consumer="memory") + 1
    stored = await eventually(
        observed,
        "gateway",
        "metrics",
        lambda r: value(parsed(r.text), "o_dead_letters_stored", consumer="memory") >= kept,
    )
    assert value(parsed(stored.text), "o_dead_letters_stored", consumer="memory") == kept
    assert grew("evolution", "o_evolution_decisions_total", decision="EvolutionConfigured") == 1

    # The same counters reach the collector over OTLP.
    ended = value(after["executor"], "o_runs_completed_total", stop_reason="end_turn")

    def exported(c: OtlpCollector) -> list[ReceivedPoint]:
        return [
            p
            for p in c.points
            if (p.service, p.name, p.attributes, p.value)
            == ("o-executor", "o.runs.completed", {"stop_reason": "end_turn"}, ended)
        ]

    assert observed.collector.wait_for(exported)


# -- health -------------------------------------------------------------------------------


def ready(response: httpx.Response) -> bool:
    return response.status_code == 200 and response.json()["status"] == "ready"


def postgres_down(response: httpx.Response) -> bool:
    return response.status_code == 503 and response.json()["checks"]["postgres"] == "unreachable"


async def test_readiness_follows_postgres_and_liveness_does_not(observed: Observed) -> None:
    every = ("gateway", *HEALTH_SERVED)
    for service in every:
        answer = await eventually(observed, service, "ready", ready)
        assert answer.json()["checks"]["nats"] == "ok"
    await asyncio.to_thread(observed.servers.postgres.stop)  # type: ignore[union-attr]
    try:
        for service in ("gateway", "executor", "memory", "evolution"):
            down = await eventually(observed, service, "ready", postgres_down)
            assert down.json()["status"] == "not ready"
        # The sandbox has no database: it stays ready. Nobody's liveness changes.
        sandbox = await ask(observed, "tool_sandbox", "ready")
        assert sandbox.status_code == 200
        assert sandbox.json()["checks"] == {"nats": "ok"}
        for service in every:
            assert (await ask(observed, service, "live")).status_code == 200
    finally:
        await asyncio.to_thread(observed.servers.postgres.start)  # type: ignore[union-attr]
    for service in ("gateway", "executor", "memory", "evolution"):
        back = await eventually(observed, service, "ready", ready)
        assert back.json()["checks"]["postgres"] == "ok"
    assert ready(await ask(observed, "tool_sandbox", "ready"))


async def test_a_projection_held_behind_makes_its_service_unready(observed: Observed) -> None:
    agent = await new_agent(observed)
    await eventually(observed, "executor", "ready", ready)
    observed.llm.push(Reply(content="later"))
    holder = await asyncpg.connect(observed.env["DATABASE_URL"])
    try:
        # Holding the runs projection's checkpoint row: it cannot apply anything.
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute(
            "SELECT * FROM projection_checkpoints WHERE projection = 'runs' FOR UPDATE"
        )
        sent = asyncio.create_task(
            observed.http.post(
                f"/v1/agents/{agent['id']}/messages/async",
                json={"messages": [{"role": "user", "content": "hello"}]},
            )
        )

        def runs_behind(response: httpx.Response) -> bool:
            check = response.json()["checks"].get("projection runs", "")
            return response.status_code == 503 and "behind the log" in check

        behind = await eventually(observed, "executor", "ready", runs_behind)
        assert behind.json()["checks"]["postgres"] == "ok"
        # Only the service keeping that projection is unready.
        gateway = await ask(observed, "gateway", "ready")
        assert gateway.status_code == 200
        await transaction.rollback()
    finally:
        await holder.close()
    await eventually(observed, "executor", "ready", ready)
    accepted = await sent
    assert accepted.status_code == 200, accepted.text
