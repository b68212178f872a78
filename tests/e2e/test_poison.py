"""Nothing a model or a tool produces can poison the log or a projection.

Postgres cannot store NUL in text or jsonb, MessagePack cannot carry a lone
surrogate, and NATS refuses a message over its payload limit: text from a
model is made storable, and a fact too large for the log ends the run with
the reason, while the agent goes on.
"""

from __future__ import annotations

import nats
import pytest

from o_contracts import subjects
from o_contracts.commands import StartRun
from o_contracts.envelope import Envelope
from o_contracts.ids import new_id
from o_contracts.models import ChatMessage
from o_runtime.commands import REPLY_HEADER, decode_reply
from tests.e2e.conftest import System
from tests.e2e.support import new_agent, send
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.servers import operator

pytestmark = pytest.mark.e2e


async def test_a_model_answer_with_nul_is_stored_with_a_replacement(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    llm.push(Reply(content="before\x00after"))
    result = await send(system, agent["id"], "say something odd")
    assert result["messages"][0]["content"] == "before\ufffdafter"
    history = (await system.http.get(f"/v1/agents/{agent['id']}/messages")).json()
    assert history[-1]["content"] == "before\ufffdafter"


async def test_a_model_answer_too_large_for_the_log_ends_the_run_and_the_agent_goes_on(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    llm.push(Reply(content="x" * 1_200_000))
    result = await send(system, agent["id"], "write a lot")
    assert result["stop_reason"]["stop_reason"] == "error"
    runs = (await system.http.get("/v1/runs/", params={"agent_id": agent["id"]})).json()
    assert [r["status"] for r in runs] == ["failed"]
    llm.push(Reply(content="short this time"))
    again = await send(system, agent["id"], "less, please")
    assert again["messages"][0]["content"] == "short this time"


async def test_a_memory_edit_with_nul_from_the_model_is_refused_not_stored(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    llm.push(
        Reply(tool_calls=[("memory_insert", {"label": "human", "new_string": "a\u0000b"})]),
        Reply(content="ok"),
    )
    result = await send(system, agent["id"], "remember")
    (returned,) = [m for m in result["messages"] if m["message_type"] == "tool_return_message"]
    assert returned["status"] == "error" and "NUL" in returned["tool_return"]
    block = await system.http.get(f"/v1/agents/{agent['id']}/core-memory/blocks/human")
    versions = (await system.http.get(f"/v1/blocks/{block.json()['id']}/versions")).json()
    assert [v["version"] for v in versions] == [1]
    # The block's projection was not poisoned: a later edit through the API applies.
    patched = await system.http.patch(
        f"/v1/agents/{agent['id']}/core-memory/blocks/human", json={"value": "Name: Sam!"}
    )
    assert patched.status_code == 200 and patched.json()["value"] == "Name: Sam!"


async def test_a_command_over_nats_with_nul_is_refused_before_anything_is_recorded(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    run_id = new_id("run")
    command = Envelope.wrap(
        StartRun(
            run_id=run_id,
            agent_id=agent["id"],
            messages=[ChatMessage(id=new_id("message"), role="user", content="a\x00b")],
        ),
        aggregate_id=agent["id"],
        producer="outside",
    )
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.jetstream().publish(
            subjects.executor_command_subject(agent["id"]),
            command.encode(),
            stream=subjects.COMMANDS_STREAM,
            headers={"Nats-Msg-Id": command.id, REPLY_HEADER: inbox},
        )
        reply = decode_reply((await sub.next_msg(timeout=30)).data)
    finally:
        await nc.close()
    assert (reply.ok, reply.status) == (False, 400)
    assert reply.error is not None and "NUL" in reply.error
    assert (await system.http.get(f"/v1/runs/{run_id}")).status_code == 404
    assert llm.requests == []


async def test_bytes_that_are_not_messagepack_on_command_and_event_subjects(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.jetstream().publish(
            subjects.executor_command_subject(agent["id"]),
            b"\xc1 not messagepack",
            stream=subjects.COMMANDS_STREAM,
            headers={"Nats-Msg-Id": new_id("cmd"), REPLY_HEADER: inbox},
        )
        reply = decode_reply((await sub.next_msg(timeout=30)).data)
        # On the agent's own event subject: every projection dead-letters it and goes on.
        await nc.jetstream().publish(
            subjects.agent_subject(agent["id"]), b"\xc1\xc1", stream=subjects.EVENTS_STREAM
        )
    finally:
        await nc.close()
    assert (reply.ok, reply.status) == (False, 400)
    assert reply.error is not None and "not MessagePack" in reply.error
    # The agent, its projections and the executor serve on.
    llm.push(Reply(content="still fine"))
    result = await send(system, agent["id"], "hello?")
    assert result["messages"][0]["content"] == "still fine"
    patched = await system.http.patch(
        f"/v1/agents/{agent['id']}", json={"description": "after the garbage"}
    )
    assert patched.status_code == 200 and patched.json()["description"] == "after the garbage"
