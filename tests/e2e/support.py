"""What the end-to-end tests share: making agents, sending messages, reading streams and
following an agent's events."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import nats
import nats.js.errors
from nats.aio.client import Client
from nats.js.api import ConsumerConfig, DeliverPolicy

from o_contracts import subjects
from o_contracts.base import Reply as CommandReply
from o_contracts.envelope import Envelope, decode
from o_contracts.projection_names import RUNS
from o_devtools.health import wait_healthy
from o_devtools.supervisor import ServiceSpec, Supervisor, with_identities
from o_evolution.projection import evolution
from o_executor.projections import runs
from o_gateway.callbacks.projection import callbacks
from o_gateway.groups_projection import groups
from o_gateway.mcp_projection import mcp_servers
from o_gateway.projections import agents
from o_gateway.tools_projection import tools
from o_memory.archival_projection import archival
from o_memory.files.projection import folders
from o_memory.projections import memory
from o_runtime.commands import REPLY_HEADER, decode_reply
from o_runtime.eventlog import EventLog
from o_runtime.waiting import ProjectionWatcher
from o_schedules.projection import schedules
from tests.e2e.conftest import System, free_port
from tests.fakes.openai_server import FakeOpenAI
from tests.servers import operator

DEADLINE = 30.0


def unique(prefix: str) -> str:
    """A name no other test (or earlier run on the same system) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def projected(system: System, seq: int, projection: str = RUNS) -> None:
    """Wait until a projection (the runs') has applied event `seq` (it notifies through
    Postgres)."""
    watcher = ProjectionWatcher(system.env["DATABASE_URL"])
    await watcher.start()
    try:
        await watcher.wait(seq, projection, timeout=30)
    finally:
        await watcher.stop()


async def projected_past(system: System, seq: int, projection: str) -> None:
    """Wait until a projection has moved past event `seq`, which may be one it does not
    apply: the waiter asks over NATS, so the checkpoint moves at once (o_runtime/waiting.py)."""
    log = await EventLog.connect(system.env["NATS_URL"], "test-projected-past")
    watcher = ProjectionWatcher(system.env["DATABASE_URL"], log.nc)
    await watcher.start()
    try:
        await watcher.wait(seq, projection, timeout=30)
    finally:
        await watcher.stop()
        await log.close()


async def until(llm: FakeOpenAI, condition: Callable[[list[dict[str, Any]]], bool]) -> None:
    """Wait until the fake LLM's requests satisfy `condition` (it notifies on each request)."""
    assert await asyncio.to_thread(llm.wait_for_requests, condition, DEADLINE)


class AgentEvents:
    """The agent's subject, followed live from its start."""

    def __init__(self, sub: Any) -> None:
        self.sub = sub
        self.seen: list[Envelope[Any]] = []
        self.last_seq = 0

    async def wait_for(self, type_name: str, count: int = 1) -> None:
        async with asyncio.timeout(DEADLINE):
            while sum(e.type == type_name for e in self.seen) < count:
                self._add(await self.sub.next_msg(timeout=DEADLINE))

    async def wait_until(
        self, found: Callable[[Envelope[Any]], bool], deadline: float = DEADLINE
    ) -> Envelope[Any]:
        """The first event (seen already or next) for which `found` is true."""
        async with asyncio.timeout(deadline):
            n = 0
            while True:
                for envelope in self.seen[n:]:
                    if found(envelope):
                        return envelope
                n = len(self.seen)
                self._add(await self.sub.next_msg(timeout=deadline))

    def _add(self, msg: Any) -> None:
        self.seen.append(decode(msg.data))
        self.last_seq = msg.metadata.sequence.stream

    async def drain(self) -> list[Envelope[Any]]:
        """Everything recorded so far (call once the run is over)."""
        while True:
            try:
                msg = await self.sub.next_msg(timeout=0.5)
            except TimeoutError:
                return self.seen
            self._add(msg)


@asynccontextmanager
async def agent_events(
    system: System, agent_id: str, conversation_id: str | None = None
) -> AsyncIterator[AgentEvents]:
    """The agent's events (or, with `conversation_id`, that conversation's), from the start."""
    async with subject_events(system, subjects.Lane(agent_id, conversation_id).events) as events:
        yield events


@asynccontextmanager
async def evolution_events(system: System, agent_id: str) -> AsyncIterator[AgentEvents]:
    """The agent's evolution decisions, from the start."""
    async with subject_events(system, subjects.evolution_subject(agent_id)) as events:
        yield events


@asynccontextmanager
async def subject_events(system: System, subject: str) -> AsyncIterator[AgentEvents]:
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        sub = await nc.jetstream().subscribe(
            subject,
            stream=subjects.EVENTS_STREAM,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.ALL,
        )
        yield AgentEvents(sub)
    finally:
        await nc.close()


async def on_subject(
    nc: Any, subject: str, stream: str = subjects.EVENTS_STREAM
) -> list[tuple[int, bytes]]:
    """(stream sequence, raw message) of every message on `subject`, read one by one."""
    js = nc.jetstream()
    out: list[tuple[int, bytes]] = []
    seq = 1
    while True:
        try:
            msg = await js.get_msg(stream, seq=seq, subject=subject, next=True)
        except nats.js.errors.NotFoundError:
            return out
        out.append((int(msg.seq or 0), msg.data or b""))
        seq = int(msg.seq or 0) + 1


async def event_types(nc: Any, subject: str) -> list[tuple[int, str]]:
    """(stream sequence, type) of every event on `subject`."""
    return [(seq, decode(raw).type) for seq, raw in await on_subject(nc, subject)]


async def new_agent(system: System, **extra: Any) -> dict[str, Any]:
    body = {
        "model": "openai/gpt-4o-mini",
        "memory_blocks": [
            {"label": "human", "value": "Name: Sam"},
            {"label": "persona", "value": "Helpful."},
        ],
        **extra,
    }
    response = await system.http.post("/v1/agents/", json=body)
    assert response.status_code == 200, response.text
    agent: dict[str, Any] = response.json()
    return agent


async def new_conversation(system: System, **extra: Any) -> tuple[dict[str, Any], Any, Any]:
    """A new agent (`extra` as for new_agent), the Letta SDK's client and a conversation of
    the agent made through it."""
    agent = await new_agent(system, **extra)
    client = system.client()
    return agent, client, client.conversations.create(agent_id=agent["id"])


async def send(system: System, agent_id: str, text: str, **extra: Any) -> dict[str, Any]:
    response = await system.http.post(
        f"/v1/agents/{agent_id}/messages",
        json={"messages": [{"role": "user", "content": text}], **extra},
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def merged(events: list[tuple[str | None, Any]]) -> list[tuple[str | None, Any]]:
    """Streamed pieces joined as a client would: consecutive chunks of one message (same id
    and type) as one; text appended, tool-call arguments appended per tool call id."""
    out: list[tuple[str | None, Any]] = []
    for event, data in events:
        prev = out[-1][1] if out else None
        same = (
            isinstance(data, dict)
            and isinstance(prev, dict)
            and bool(data.get("id"))
            and (prev.get("id"), prev.get("message_type")) == (data["id"], data["message_type"])
        )
        if same and data["message_type"] in ("assistant_message", "reasoning_message"):
            key = "content" if data["message_type"] == "assistant_message" else "reasoning"
            out[-1] = (event, prev | {key: prev[key] + data[key]})
        elif same and data["message_type"] == "tool_call_message":
            calls = {c["tool_call_id"]: dict(c) for c in prev["tool_calls"]}
            for c in data["tool_calls"]:
                if c["tool_call_id"] in calls:
                    calls[c["tool_call_id"]]["arguments"] += c["arguments"]
                else:
                    calls[c["tool_call_id"]] = dict(c)
            joined = list(calls.values())
            out[-1] = (event, prev | {"tool_calls": joined, "tool_call": joined[0]})
        else:
            out.append((event, data))
    return out


def parse_sse(raw: str, pings: bool = False) -> list[tuple[str | None, Any]]:
    """SSE frames as (event, data); pings (sent while a run is idle) left out unless asked."""
    events: list[tuple[str | None, Any]] = []
    for frame in raw.split("\n\n"):
        if not frame.strip():
            continue
        event = None
        data = None
        for line in frame.split("\n"):
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
        assert data is not None, frame
        parsed = data if data == "[DONE]" else json.loads(data)
        if pings or not (isinstance(parsed, dict) and parsed.get("message_type") == "ping"):
            events.append((event, parsed))
    return events


@asynccontextmanager
async def another_gateway(
    system: System, seed_file: Callable[[str], Path] | None = None
) -> AsyncIterator[tuple[httpx.AsyncClient, Supervisor]]:
    """Another gateway process on the same NATS and Postgres, on a port of its own (with
    `seed_file`: connecting as the gateway role with that seed); its client and supervisor."""
    port = free_port()
    env = {**system.env, "O_HTTP_PORT": str(port)}
    specs = [ServiceSpec.module("gateway", "o_gateway")]
    if seed_file is not None:
        specs = with_identities(specs, seed_file)
    supervisor = Supervisor(specs, env, backoff_initial=0.2)
    await supervisor.start()
    http = httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}",
        headers={"Authorization": "Bearer test-key"},
        timeout=60,
    )
    try:
        await wait_healthy(http)
        yield http, supervisor
    finally:
        await http.aclose()
        await supervisor.stop()


# -- commands published again (exactly once, whatever is delivered twice) ------------


@asynccontextmanager
async def connected(system: System) -> AsyncIterator[Client]:
    """A NATS connection as the operator, closed on exit."""
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        yield nc
    finally:
        await nc.close()


async def log_end(system: System) -> int:
    """The events stream's last sequence now."""
    async with connected(system) as nc:
        info = await nc.jetstream().stream_info(subjects.EVENTS_STREAM)
        return int(info.state.last_seq)


@dataclasses.dataclass(frozen=True)
class Stored:
    """A message as a stream holds it."""

    seq: int
    subject: str
    data: bytes


async def stored(nc: Client, stream: str, start: int = 1) -> list[Stored]:
    """Every message `stream` holds from sequence `start` to its end as the call began, in
    order. One ordered consumer: a request per message costs about a millisecond, and the
    log of a test system shared by a module holds thousands."""
    js = nc.jetstream()
    end = int((await js.stream_info(stream)).state.last_seq)
    if end < start:
        return []
    sub = await js.subscribe(
        "",
        stream=stream,
        ordered_consumer=True,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start),
    )
    found: list[Stored] = []
    try:
        consumer = await sub.consumer_info()
        # (Pending counts only what the server has not pushed yet.)
        if consumer.num_pending == 0 and not consumer.delivered.consumer_seq:
            return found  # every message in the range deleted
        while True:
            msg = await sub.next_msg(timeout=10)
            meta = msg.metadata
            if meta.sequence.stream > end:
                return found
            found.append(Stored(meta.sequence.stream, msg.subject, msg.data or b""))
            if meta.sequence.stream == end or meta.num_pending == 0:
                return found
    finally:
        await sub.unsubscribe()


async def appended_since(system: System, start: int, prefix: str) -> list[bytes]:
    """The events appended after `start` on subjects beginning with `prefix`."""
    async with connected(system) as nc:
        found = await stored(nc, subjects.EVENTS_STREAM, start + 1)
    return [m.data for m in found if m.subject.startswith(prefix)]


async def last_command(nc: Client, subject: str) -> Envelope[Any]:
    """The last command published on `subject`."""
    msg = await nc.jetstream().get_last_msg(subjects.COMMANDS_STREAM, subject)
    return decode(msg.data or b"")


async def publish_again(nc: Client, subject: str, command: Envelope[Any]) -> CommandReply:
    """Publish `command` under a Nats-Msg-Id the stream has not seen; wait for its reply."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        await nc.jetstream().publish(
            subject,
            command.encode(),
            stream=subjects.COMMANDS_STREAM,
            headers={"Nats-Msg-Id": f"again-{uuid.uuid4()}", REPLY_HEADER: inbox},
        )
        msg = await sub.next_msg(timeout=30)
        return decode_reply(msg.data)
    finally:
        await sub.unsubscribe()


async def caught_up(system: System) -> None:
    """Wait until every projection has reached the last event it follows.

    Checkpoints move lazily past events a projection does not handle; a waiter
    that says it waits (over NATS) has them written at once.
    """
    log = await EventLog.connect(system.env["NATS_URL"], "test")
    watcher = ProjectionWatcher(system.env["DATABASE_URL"], log.nc)
    await watcher.start()
    try:
        for projection in (
            agents,
            archival,
            memory,
            runs,
            tools,
            mcp_servers,
            groups,
            evolution,
            callbacks,
            schedules,
            folders,
        ):
            last = 0
            async for raw in log.replay(projection.filter_subject):
                last = raw.seq
            await watcher.wait(last, projection.name, timeout=30)
    finally:
        await watcher.stop()
        await log.close()


def files_holding(folder: Path, needle: bytes) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and needle in p.read_bytes()]


async def plaintext_found(dsn: str, nats_store: Path | None, needle: str) -> list[str]:
    """Where `needle` is in plaintext: files of the NATS store (every stream and bucket),
    tables of Postgres (every row of every table)."""
    found = []
    if nats_store is not None:
        found += await asyncio.to_thread(files_holding, nats_store, needle.encode())
    conn = await asyncpg.connect(dsn)
    try:
        tables = [
            r["t"]
            for r in await conn.fetch(
                "SELECT quote_ident(table_schema) || '.' || quote_ident(table_name) AS t"
                " FROM information_schema.tables WHERE table_type = 'BASE TABLE'"
                " AND table_schema NOT IN ('pg_catalog', 'information_schema')"
            )
        ]
        assert len(tables) > 10
        for table in tables:
            if await conn.fetchval(
                f"SELECT count(*) FROM {table} x WHERE row_to_json(x)::text LIKE '%' || $1 || '%'",
                needle,
            ):
                found.append(table)
    finally:
        await conn.close()
    return found


async def register_provider(
    system: System, name: str, base_url: str, api_key: str, provider_type: str = "openai"
) -> dict[str, Any]:
    """A provider registered through the API (Letta's bring-your-own-key)."""
    created = await system.http.post(
        "/v1/providers/",
        json={
            "name": name,
            "provider_type": provider_type,
            "api_key": api_key,
            "base_url": base_url,
        },
    )
    assert created.status_code == 200, created.text
    provider: dict[str, Any] = created.json()
    return provider


@contextlib.contextmanager
def brought_provider(api_key: str) -> Iterator[FakeOpenAI]:
    """The provider a user brings: an OpenAI-compatible server of its own that refuses any
    key but `api_key`, with a chat and an embedding model."""
    fake = FakeOpenAI(models=["lab-chat", "lab-embed-small"])
    fake.start()
    fake.api_key = api_key
    try:
        yield fake
    finally:
        fake.stop()


@asynccontextmanager
async def short_dedup_window(system: System, seconds: float = 0.5) -> AsyncIterator[None]:
    """The events stream's duplicate window shortened (restored on exit): what a request sent
    again hours later meets, without waiting the two minutes out."""
    async with connected(system) as nc:
        js = nc.jetstream()
        config = (await js.stream_info(subjects.EVENTS_STREAM)).config
        window = config.duplicate_window
        # Twice: nats-server (2.15) wakes its duplicate sweep as an update begins but installs
        # the new window only as it ends, so the first sweep may read the old window and sleep
        # out the whole of it (two minutes). The second update's sweep reads a short window
        # either way: the first's is installed before the second is taken.
        for shortened in (seconds * 2, seconds):
            await js.update_stream(dataclasses.replace(config, duplicate_window=shortened))
        try:
            yield
        finally:
            await js.update_stream(dataclasses.replace(config, duplicate_window=window))


async def forgotten(system: System, subject: str, msg_id: str) -> None:
    """Wait until the events stream no longer takes `msg_id` for a duplicate. Asked by
    publishing under it expecting a last message id the stream never has: answered as a
    duplicate while the id is remembered, refused (wrong last msg ID, 10070) once it is not;
    stored neither way. (nats-server checks the other expectations, a subject's last
    sequence included, before duplicates: they cannot tell.)"""
    headers = {"Nats-Msg-Id": msg_id, "Nats-Expected-Last-Msg-Id": f"never-{uuid.uuid4()}"}
    async with connected(system) as nc:
        js = nc.jetstream()
        async with asyncio.timeout(DEADLINE):
            while True:
                try:
                    ack = await js.publish(subject, b"", headers=headers)
                except nats.js.errors.APIError as exc:
                    assert exc.err_code == 10070, exc
                    return
                assert ack.duplicate, ack
                await asyncio.sleep(0.1)
