"""Who may write the log (docs/security.md): the real nats-server O starts refuses anonymous
clients and holds each identity to its role (o_setup/roles.py); an outside publisher sends
only its own agents' commands, validated as the HTTP API validates them; a tool's secret
is nowhere in plaintext afterwards."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NatsClient
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from o_contracts import subjects
from o_contracts.commands import AttachArchive, StartRun
from o_contracts.envelope import Envelope, decode
from o_contracts.events import BlockUpdated, PassageDeleted, RunStarted
from o_contracts.ids import new_id
from o_contracts.limits import MAX_INPUT_TEXT_BYTES, input_over_limit
from o_contracts.models import ApprovalDecision, ChatMessage
from o_runtime.commands import REPLY_HEADER, decode_reply
from o_runtime.nats_identity import Identity
from tests.e2e.conftest import System
from tests.e2e.support import new_agent, plaintext_found, send
from tests.e2e.test_approvals import INSERT
from tests.e2e.test_tools import TOKEN_CHECK, create_tool
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.servers import Servers, operator

pytestmark = pytest.mark.e2e


class Connection:
    """A client of O's NATS as one identity, keeping what the server told it went wrong."""

    def __init__(self, nc: NatsClient, errors: list[str], news: asyncio.Event) -> None:
        self.nc = nc
        self.errors = errors
        self._news = news
        self.js = nc.jetstream(timeout=2)

    async def refused(self, what: str) -> None:
        """Return once the server has said `what` was a permissions violation."""
        async with asyncio.timeout(10):
            # (nats-py lowercases what the server says.)
            while not any(what.lower() in e for e in self.errors):
                self._news.clear()
                await self._news.wait()


async def connect(url: str, identity: Identity) -> Connection:
    errors: list[str] = []
    news = asyncio.Event()

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))
        news.set()

    nc = await nats.connect(
        url, error_cb=on_error, allow_reconnect=False, connect_timeout=5, **identity.options()
    )
    return Connection(nc, errors, news)


@pytest.fixture
async def as_role(servers: Servers) -> AsyncIterator[Any]:
    opened: list[Connection] = []

    async def open_as(role: str) -> Connection:
        conn = await connect(servers.nats_url, servers.identity(role))
        opened.append(conn)
        return conn

    yield open_as
    for conn in opened:
        await conn.nc.close()


async def last_seq(subject: str) -> int:
    """The stream sequence of the last event on `subject` (0: none), read as the operator."""
    nc = await nats.connect(_URL[0], **operator())
    try:
        msg = await nc.jetstream().get_last_msg(subjects.EVENTS_STREAM, subject)
        return int(msg.seq or 0)
    except NotFoundError:
        return 0
    finally:
        await nc.close()


async def events_on(subject: str) -> list[Envelope[Any]]:
    """Every event on `subject`, in order, read as the operator."""
    nc = await nats.connect(_URL[0], **operator())
    out: list[Envelope[Any]] = []
    try:
        js, seq = nc.jetstream(), 0
        while True:
            try:
                msg = await js.get_msg(subjects.EVENTS_STREAM, seq + 1, subject=subject, next=True)
            except NotFoundError:
                return out
            out.append(decode(msg.data or b""))
            seq = int(msg.seq or 0)
    finally:
        await nc.close()


_URL: list[str] = []


@pytest.fixture(autouse=True)
def _nats_url(servers: Servers) -> None:
    _URL[:] = [servers.nats_url]


def forged_block_update(block_id: str) -> Envelope[Any]:
    return Envelope.wrap(
        BlockUpdated(block_id=block_id, version=99, changes={"value": "forged"}),
        aggregate_id=block_id,
        producer="intruder",
    )


async def test_an_anonymous_connection_is_refused(servers: Servers) -> None:
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    with pytest.raises(Exception):  # noqa: B017  (nats-py raises its own kinds; the reason:)
        await nats.connect(
            servers.nats_url, error_cb=on_error, allow_reconnect=False, connect_timeout=5
        )
    assert any("authorization violation" in e.lower() for e in errors), errors


async def test_a_key_the_server_was_not_told_is_refused(servers: Servers, tmp_path: Path) -> None:
    from o_runtime import nkey

    seed = tmp_path / "stranger.nk"
    seed.write_text(nkey.new_user_seed())
    with pytest.raises(Exception):  # noqa: B017
        await connect(servers.nats_url, Identity.from_file("stranger", seed))


async def test_the_sandbox_may_not_append_a_block_update_nor_make_a_consumer(
    system: System, as_role: Any
) -> None:
    agent = await new_agent(system)
    block_id = agent["memory"]["blocks"][0]["id"]
    subject = subjects.block_subject(block_id)
    before = await last_seq(subject)
    sandbox = await as_role("tool_sandbox")

    with pytest.raises(nats.errors.TimeoutError):
        await sandbox.js.publish(subject, forged_block_update(block_id).encode())
    await sandbox.refused(f'Permissions Violation for Publish to "{subject}"')

    name = f"intruder-{uuid.uuid4().hex[:8]}"
    with pytest.raises(nats.errors.TimeoutError):
        await sandbox.js.add_consumer(
            subjects.EVENTS_STREAM,
            ConsumerConfig(durable_name=name, deliver_policy=DeliverPolicy.ALL),
        )
    # ($JS.API.CONSUMER.CREATE or .DURABLE.CREATE, as nats-py chooses.)
    await sandbox.refused('Permissions Violation for Publish to "$JS.API.CONSUMER.')
    # Nor may it read the log as it happens.
    await sandbox.nc.subscribe(subjects.ALL_EVENTS)
    await sandbox.refused(f'Permissions Violation for Subscription to "{subjects.ALL_EVENTS}"')

    assert await last_seq(subject) == before
    nc = await nats.connect(_URL[0], **operator())
    try:
        with pytest.raises(NotFoundError):
            await nc.jetstream().consumer_info(subjects.EVENTS_STREAM, name)
    finally:
        await nc.close()


async def test_the_gateway_may_not_append_memory_events(system: System, as_role: Any) -> None:
    agent = await new_agent(system)
    block_id = agent["memory"]["blocks"][0]["id"]
    block, archival = subjects.block_subject(block_id), subjects.archival_subject(agent["id"])
    before = (await last_seq(block), await last_seq(archival))
    gateway = await as_role("gateway")

    with pytest.raises(nats.errors.TimeoutError):
        await gateway.js.publish(block, forged_block_update(block_id).encode())
    await gateway.refused(f'Permissions Violation for Publish to "{block}"')
    passage = Envelope.wrap(
        PassageDeleted(passage_id=new_id("passage"), agent_id=agent["id"]),
        aggregate_id=agent["id"],
        producer="intruder",
    )
    with pytest.raises(nats.errors.TimeoutError):
        await gateway.js.publish(archival, passage.encode())
    await gateway.refused(f'Permissions Violation for Publish to "{archival}"')

    assert (await last_seq(block), await last_seq(archival)) == before


# -- outside publishers -----------------------------------------------------------------


@pytest.fixture
async def partner(servers: Servers, system: System) -> AsyncIterator[tuple[Connection, str, str]]:
    """An outside publisher allowed one agent (`mine`); another agent (`theirs`) exists."""
    mine, theirs = (await new_agent(system))["id"], (await new_agent(system))["id"]
    name = f"partner-{uuid.uuid4().hex[:8]}"
    seed = servers.credentials.add_publisher(name, [mine])
    servers.reload()
    identity = Identity.from_file(name, seed)
    # The server takes the new key once it has read its configuration again.
    while True:
        try:
            conn = await connect(servers.nats_url, identity)
            break
        except Exception:
            await asyncio.sleep(0.05)
    try:
        yield conn, mine, theirs
    finally:
        await conn.nc.close()
        servers.credentials.remove_publisher(name)
        servers.reload()


def start_run(agent_id: str, text: str, subject_agent: str | None = None) -> Envelope[Any]:
    command = StartRun(
        run_id=new_id("run"),
        agent_id=agent_id,
        messages=[ChatMessage(id=new_id("message"), role="user", content=text)],
    )
    return Envelope.wrap(command, aggregate_id=subject_agent or agent_id, producer="partner")


async def publish_command(conn: Connection, subject: str, data: bytes) -> Any:
    """Publish a command as the publisher would, and return O's reply to it."""
    inbox = conn.nc.new_inbox()
    replies = await conn.nc.subscribe(inbox, max_msgs=1)
    await conn.js.publish(
        subject,
        data,
        stream=subjects.COMMANDS_STREAM,
        headers={"Nats-Msg-Id": new_id("cmd"), REPLY_HEADER: inbox},
    )
    return decode_reply((await replies.next_msg(timeout=30)).data)


async def test_an_outside_publishers_command_for_its_agent_runs_once(
    partner: tuple[Connection, str, str], llm: FakeOpenAI
) -> None:
    conn, mine, _ = partner
    command = start_run(mine, "from a partner")
    llm.push(Reply(content="hello partner"))
    inbox = conn.nc.new_inbox()
    replies = await conn.nc.subscribe(inbox, max_msgs=1)
    subject = subjects.executor_command_subject(mine)
    headers = {"Nats-Msg-Id": command.id, REPLY_HEADER: inbox}
    await conn.js.publish(
        subject, command.encode(), stream=subjects.COMMANDS_STREAM, headers=headers
    )
    reply = decode_reply((await replies.next_msg(timeout=30)).data)
    assert reply.ok and reply.result is not None and reply.result["stop_reason"] == "end_turn"
    # Sent again (a publisher retrying), it is the same command: nothing runs twice.
    ack = await conn.js.publish(
        subject, command.encode(), stream=subjects.COMMANDS_STREAM, headers=headers
    )
    assert ack.duplicate
    run_id = command.data.run_id
    ran = [
        e.type
        for e in await events_on(subjects.agent_subject(mine))
        if getattr(e.data, "run_id", None) == run_id
    ]
    assert ran == ["RunStarted", "RunCompleted"]  # (the answer in the run's end)


async def test_an_outside_publisher_may_not_append_an_event(
    partner: tuple[Connection, str, str],
) -> None:
    conn, mine, _ = partner
    subject = subjects.agent_subject(mine)
    before = await last_seq(subject)
    forged = Envelope.wrap(
        RunStarted(run_id=new_id("run"), agent_id=mine, messages=[], max_steps=1),
        aggregate_id=mine,
        producer="partner",
    )
    with pytest.raises(nats.errors.TimeoutError):
        await conn.js.publish(subject, forged.encode())
    await conn.refused(f'Permissions Violation for Publish to "{subject}"')
    assert await last_seq(subject) == before


async def test_an_outside_publishers_oversized_command_is_refused_as_the_api_refuses_it(
    partner: tuple[Connection, str, str], system: System
) -> None:
    conn, mine, _ = partner
    # Two messages, each within a message's limit, together over a request's.
    half = "x" * (MAX_INPUT_TEXT_BYTES // 2 + 1)
    reason = input_over_limit(2 * len(half))
    assert reason is not None
    over_http = await system.http.post(
        f"/v1/agents/{mine}/messages",
        json={"messages": [{"role": "user", "content": half}, {"role": "user", "content": half}]},
    )
    assert over_http.status_code == 422 and reason in over_http.text
    # (Built without validation, as another system's code might send it.)
    command = StartRun.model_construct(
        run_id=new_id("run"),
        agent_id=mine,
        conversation_id=None,
        messages=[ChatMessage(id=new_id("message"), role="user", content=half) for _ in "ab"],
        approvals=[],
        client_tools=[],
        max_steps=50,
        stream_tokens=False,
    )
    envelope = Envelope.wrap(command, aggregate_id=mine, producer="partner")
    before = await last_seq(subjects.agent_subject(mine))
    reply = await publish_command(conn, subjects.executor_command_subject(mine), envelope.encode())
    assert not reply.ok and reply.status == 400 and reason in (reply.error or "")
    assert await last_seq(subjects.agent_subject(mine)) == before


def answers(agent_id: str, *call_ids: str, text: str | None = None) -> Envelope[Any]:
    """A StartRun approving `call_ids` (with a message, if `text`), as a publisher sends it."""
    messages = [ChatMessage(id=new_id("message"), role="user", content=text)] if text else []
    command = StartRun(
        run_id=new_id("run"),
        agent_id=agent_id,
        messages=messages,
        approvals=[ApprovalDecision(tool_call_id=c) for c in call_ids],
    )
    return Envelope.wrap(command, aggregate_id=agent_id, producer="partner")


async def test_an_outside_publishers_input_meets_pending_approvals_as_the_apis_does(
    partner: tuple[Connection, str, str], system: System, llm: FakeOpenAI
) -> None:
    conn, mine, _ = partner
    rules = [{"type": "requires_approval", "tool_name": INSERT[0]}]
    patched = await system.http.patch(f"/v1/agents/{mine}", json={"tool_rules": rules})
    assert patched.status_code == 200, patched.text
    llm.push(Reply(tool_calls=[INSERT]))
    asked = await send(system, mine, "I like chess")
    assert asked["stop_reason"]["stop_reason"] == "requires_approval"
    call_id = asked["messages"][0]["tool_call"]["tool_call_id"]
    subject, commands = subjects.agent_subject(mine), subjects.executor_command_subject(mine)
    before = await last_seq(subject)

    # A plain message while the call waits: the API's 409, its detail whole.
    busy = await system.http.post(f"/v1/agents/{mine}/messages", json={"input": "hello?"})
    assert busy.status_code == 409
    reply = await publish_command(conn, commands, start_run(mine, "hello?").encode())
    assert (reply.ok, reply.status) == (False, 409)
    assert reply.result == {"detail": busy.json()["detail"]}
    assert reply.error == busy.json()["detail"]["message"]
    # Answers to a call that does not wait: the API's 400, in its words.
    wrong = await system.http.post(
        f"/v1/agents/{mine}/messages",
        json={"messages": [{"type": "approval", "approvals": [{"tool_call_id": "call_nope"}]}]},
    )
    assert wrong.status_code == 400
    reply = await publish_command(conn, commands, answers(mine, "call_nope").encode())
    assert (reply.ok, reply.status, reply.error) == (False, 400, wrong.json()["detail"])
    # Nothing of either reached the log.
    assert await last_seq(subject) == before

    # The right answer is taken: the tool runs and the turn goes on.
    llm.push(Reply(content="Saved."))
    reply = await publish_command(conn, commands, answers(mine, call_id).encode())
    assert reply.ok and reply.result is not None and reply.result["stop_reason"] == "end_turn"
    block = await system.http.get(f"/v1/agents/{mine}/core-memory/blocks/human")
    assert block.json()["value"] == "Name: Sam\nLikes: chess"
    # The same answers again (a publisher retrying after the window that drops repeats):
    # as over HTTP, and in Letta, not refused; the tool does not run again, and the turn
    # goes on with the message sent with them, or a keep-alive message.
    llm.push(Reply(content="Still here."), Reply(content="Yes?"))
    reply = await publish_command(conn, commands, answers(mine, call_id).encode())
    assert reply.ok and reply.result is not None and reply.result["stop_reason"] == "end_turn"
    sent = llm.requests[-1]["messages"]
    assert sent[-1]["role"] == "user" and "keep-alive" in sent[-1]["content"]
    reply = await publish_command(conn, commands, answers(mine, call_id, text="and?").encode())
    assert reply.ok and reply.result is not None and reply.result["stop_reason"] == "end_turn"
    sent = llm.requests[-1]["messages"]
    assert sent[-1]["role"] == "user" and "and?" in sent[-1]["content"]
    assert [m["tool_call_id"] for m in sent if m["role"] == "tool"] == [call_id]
    assert (await system.http.get(f"/v1/agents/{mine}/core-memory/blocks/human")).json()[
        "value"
    ] == "Name: Sam\nLikes: chess"
    # Nothing waits now: answers to another call are refused as the API refuses them.
    nothing = await system.http.post(
        f"/v1/agents/{mine}/messages",
        json={"messages": [{"type": "approval", "approvals": [{"tool_call_id": "call_nope"}]}]},
    )
    assert nothing.status_code == 400
    seq = await last_seq(subject)
    reply = await publish_command(conn, commands, answers(mine, "call_nope").encode())
    assert (reply.ok, reply.status, reply.error) == (False, 400, nothing.json()["detail"])
    assert await last_seq(subject) == seq


async def test_an_outside_publishers_malformed_command_is_refused_with_a_reason(
    partner: tuple[Connection, str, str],
) -> None:
    conn, mine, _ = partner
    before = await last_seq(subjects.agent_subject(mine))
    reply = await publish_command(
        conn, subjects.executor_command_subject(mine), b"\x93not a command"
    )
    assert not reply.ok and reply.status == 400 and reply.error
    assert await last_seq(subjects.agent_subject(mine)) == before


async def test_an_outside_publisher_may_not_command_an_agent_it_does_not_own(
    partner: tuple[Connection, str, str],
) -> None:
    conn, mine, theirs = partner
    before = await last_seq(subjects.agent_subject(theirs))
    # On the other agent's subject: the server refuses it.
    subject = subjects.executor_command_subject(theirs)
    with pytest.raises(nats.errors.TimeoutError):
        await conn.js.publish(subject, start_run(theirs, "not yours").encode())
    await conn.refused(f'Permissions Violation for Publish to "{subject}"')
    # On its own agent's subject but naming the other: the executor refuses it.
    reply = await publish_command(
        conn, subjects.executor_command_subject(mine), start_run(theirs, "not yours").encode()
    )
    assert not reply.ok and reply.status == 403
    assert reply.error == (
        f"StartRun acts on {theirs}, but was sent on {subjects.executor_command_subject(mine)}:"
        " a command is sent on the subject of what it acts on"
    )
    assert await last_seq(subjects.agent_subject(theirs)) == before


async def test_an_outside_publisher_allowed_its_agents_may_not_touch_archives(
    partner: tuple[Connection, str, str], system: System
) -> None:
    conn, mine, _ = partner
    made = await system.http.post("/v1/archives/", json={"name": "not the partner's"})
    assert made.status_code == 200, made.text
    archive = made.json()["id"]
    attach = AttachArchive(archive_id=archive, agent_id=mine)
    before = await last_seq(subjects.archive_agent_subject(archive, mine))
    # On the archive's subject (archives' commands are keyed by the archive): refused by
    # the server, as is making an archive.
    subject = subjects.memory_command_subject(archive)
    with pytest.raises(nats.errors.TimeoutError):
        await conn.js.publish(
            subject, Envelope.wrap(attach, aggregate_id=archive, producer="partner").encode()
        )
    await conn.refused(f'Permissions Violation for Publish to "{subject}"')
    # On its own agent's subject: the memory service refuses it.
    reply = await publish_command(
        conn,
        subjects.memory_command_subject(mine),
        Envelope.wrap(attach, aggregate_id=mine, producer="partner").encode(),
    )
    assert not reply.ok and reply.status == 403, reply
    assert await last_seq(subjects.archive_agent_subject(archive, mine)) == before
    listed = await system.http.get("/v1/archives/", params={"agent_id": mine})
    assert listed.json() == []


# -- secrets ----------------------------------------------------------------------------


async def test_a_tools_secret_is_nowhere_in_plaintext_after_a_run(
    system: System, servers: Servers, llm: FakeOpenAI, request: pytest.FixtureRequest
) -> None:
    capture = request.config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.read_global_capture()  # (what the services wrote before this test)
    secret = f"sk-live-{uuid.uuid4().hex}"
    # (Named apart from test_tools' tool: tool names are unique in the shared system.)
    tool = await create_tool(system, TOKEN_CHECK.replace("token_fingerprint", "secret_digest"))
    agent = await new_agent(system, tool_ids=[tool["id"]], secrets={"API_TOKEN": secret})
    llm.push(Reply(tool_calls=[("secret_digest", {})]), Reply(content="done"))
    ret = (await send(system, agent["id"], "check"))["messages"][1]
    assert ret["tool_return"] == hashlib.sha256(secret.encode()).hexdigest()

    # The NATS store (every stream and bucket) and Postgres (every row of every table).
    assert await plaintext_found(system.env["DATABASE_URL"], servers.nats_store, secret) == []
    # What the services wrote meanwhile (their stdout and stderr).
    if capture is not None:
        out, err = capture.read_global_capture()
        assert secret not in out and secret not in err


# -- rotation ---------------------------------------------------------------------------


async def accepted(url: str, identity: Identity) -> bool:
    try:
        conn = await connect(url, identity)
    except Exception:
        return False
    await conn.nc.close()
    return True


async def until_server_says(url: str, identity: Identity, accepts: bool) -> None:
    """Return once the server accepts (or refuses) `identity`: after its reload."""
    async with asyncio.timeout(30):
        while True:
            if await accepted(url, identity) == accepts:
                return
            await asyncio.sleep(0.05)


async def test_rotating_the_executors_key_with_the_system_running_loses_no_request(
    system: System, servers: Servers
) -> None:
    """docs/security.md's procedure: rotate (both keys accepted), restart the executors
    one by one (each takes the new seed), retire the old key; messages sent all the while
    are each answered once, and runs go on with the new key alone."""
    agent = await new_agent(system)
    answered: list[str] = []
    retired = asyncio.Event()

    async def keep_sending() -> None:
        n, after = 0, 0
        while after < 2:
            n += 1
            after += retired.is_set()
            reply = await send(system, agent["id"], f"m{n}")
            answered.append(reply["messages"][-1]["content"])

    sending = asyncio.create_task(keep_sending())
    old = servers.identity("executor")
    servers.credentials.rotate("executor")
    servers.reload()
    new = servers.identity("executor")
    assert new.public_key != old.public_key
    await until_server_says(servers.nats_url, new, accepts=True)
    for pid in system.supervisor.pids("executor"):
        restarts = system.supervisor.restart_count("executor")
        os.kill(pid, signal.SIGTERM)
        await asyncio.wait_for(system.supervisor.wait_for_restarts("executor", restarts + 1), 60)
    servers.credentials.retire("executor")
    servers.reload()
    await until_server_says(servers.nats_url, old, accepts=False)
    retired.set()
    await asyncio.wait_for(sending, 120)
    assert answered == [f"echo: m{i + 1}" for i in range(len(answered))]
    # Each message ran once: one RunCompleted per answer.
    completed = [
        e for e in await events_on(subjects.agent_subject(agent["id"])) if e.type == "RunCompleted"
    ]
    assert len(completed) == len(answered)
