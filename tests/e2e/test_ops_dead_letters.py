"""A command the executor could not handle five times is dead-lettered; once its cause is
fixed, `python -m o_ops dead-letters redrive ID` sends it back and it is done once, however
often it is redriven.

The cause here is a real one an operator meets: a projection row broken by hand (the
agent's tool's schema in the `tools` table), which makes every try of the agent's run fail
in the executor. `projections verify` shows it, `projections rebuild` mends it from the log.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import asyncpg
import nats
import pytest

from o_ops.dead_letters import letters
from tests.e2e.conftest import System
from tests.e2e.ops_support import o_ops
from tests.e2e.support import new_agent
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.servers import operator

pytestmark = pytest.mark.e2e

# Five tries, backing off 2, 4, 8 and 16 s (o_runtime/commands.py), then the dead letter.
DEAD_LETTERED_WITHIN = 90.0


async def dead_letter_of(system: System, run_id: str) -> dict[str, Any]:
    """The dead letter of the StartRun of `run_id`, once there is one."""
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        async with asyncio.timeout(DEAD_LETTERED_WITHIN):
            while True:
                async for letter, data in letters(nc.jetstream()):
                    if run_id.encode() in data and letter.type == "StartRun":
                        return letter.summary()
                await asyncio.sleep(1.0)
    finally:
        await nc.close()


def asked_with(llm: FakeOpenAI, text: str) -> int:
    return sum(text in json.dumps(body) for body in list(llm.requests))


async def test_a_dead_lettered_command_redriven_is_done_once(
    system: System, llm: FakeOpenAI
) -> None:
    name = f"redriven_{uuid.uuid4().hex[:8]}"
    tool = await system.http.post(
        "/v1/tools/",
        json={
            "source_code": f'def {name}(n: int) -> int:\n    """Twice n.\n\n    Args:\n'
            '        n: A number.\n    """\n    return 2 * n\n'
        },
    )
    assert tool.status_code == 200, tool.text
    agent = await new_agent(system, tool_ids=[tool.json()["id"]])
    db = await asyncpg.connect(system.env["DATABASE_URL"])
    try:
        # Broken by hand: the executor cannot read the agent's tool any more.
        await db.execute(
            "UPDATE tools SET json_schema = '\"broken\"'::jsonb WHERE id = $1", tool.json()["id"]
        )
        text = f"please answer {uuid.uuid4().hex}"
        sent = await system.http.post(
            f"/v1/agents/{agent['id']}/messages/async",
            json={"messages": [{"role": "user", "content": text}]},
        )
        assert sent.status_code == 200, sent.text
        run_id = sent.json()["id"]
        letter = await dead_letter_of(system, run_id)
        assert letter["consumer"] == "executor"
        assert letter["origin_subject"] == f"o.cmd.executor.{agent['id']}"
        assert letter["reason"].startswith("failed 5 times")
        assert letter["redrivable"] is True
        assert asked_with(llm, text) == 0

        listed = await o_ops(system.env, "dead-letters", "list", "--json")
        assert listed.code == 0, listed.err
        assert letter["id"] in [d["id"] for d in json.loads(listed.out)]
        shown = await o_ops(system.env, "dead-letters", "show", str(letter["id"]))
        assert shown.code == 0, shown.err
        body = json.loads(shown.out)["body"]
        assert (body["type"], body["data"]["run_id"]) == ("StartRun", run_id)

        # The operator finds the broken row, and mends it from the log.
        verified = await o_ops(system.env, "projections", "verify", "tools")
        assert verified.code == 1, verified.out + verified.err
        assert f'tools (id={tool.json()["id"]}): json_schema: live "broken"' in verified.out
        rebuilt = await o_ops(system.env, "projections", "rebuild", "tools")
        assert rebuilt.code == 0, rebuilt.err
        assert (await o_ops(system.env, "projections", "verify", "tools")).code == 0
    finally:
        await db.close()

    llm.push(Reply(content="done at last"))
    redriven = await o_ops(system.env, "dead-letters", "redrive", str(letter["id"]))
    assert redriven.code == 0, redriven.out + redriven.err
    assert f"dead letter {letter['id']} (StartRun, executor) sent again" in redriven.out
    assert "done" in redriven.out.splitlines()[-1]
    run = (await system.http.get(f"/v1/runs/{run_id}")).json()
    assert (run["status"], run["stop_reason"]) == ("completed", "end_turn")
    assert asked_with(llm, text) == 1

    again = await o_ops(system.env, "dead-letters", "redrive", str(letter["id"]))
    assert again.code == 1
    assert "redriven already" in again.out
    messages = (await system.http.get(f"/v1/runs/{run_id}/messages")).json()
    assert [m["message_type"] for m in messages] == ["user_message", "assistant_message"]
    assert asked_with(llm, text) == 1


async def test_an_event_a_projection_gave_up_on_is_not_redriven(system: System) -> None:
    """Planted the way a projection leaves one (o_runtime/dead_letters.py), never sent."""
    from o_runtime.dead_letters import dead_letter

    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        origin = f"o.evt.agent.agent-{uuid.uuid4()}"
        await dead_letter(
            nc.jetstream(),
            "projection-runs",
            b"\xc1not an event",
            "malformed",
            origin_subject=origin,
            origin_seq=999_999,
        )
        found = [d async for d, _ in letters(nc.jetstream()) if d.origin_subject == origin]
    finally:
        await nc.close()
    ran = await o_ops(system.env, "dead-letters", "redrive", str(found[0].id))
    assert ran.code == 1
    assert "in the log already" in ran.out
    assert "python -m o_ops projections rebuild runs" in ran.out
