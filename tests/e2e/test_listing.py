"""Every list route pages as Letta's do, walked through the official SDK's auto-paging
(it asks again with after=<last id> until a page comes back empty), and the small
read routes beside them: messages by id, steps, tags, counts, a block's agents."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from letta_client import Letta, UnprocessableEntityError

from tests.e2e.conftest import System
from tests.e2e.support import new_agent
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e

ORDERS = ("asc", "desc")


def walked(items: Iterable[Any], key: Callable[[Any], Any] = lambda i: i.id) -> list[Any]:
    """Every item the SDK's iteration yields, which must end and yield each item once
    (checked as it goes: a server that repeats a page would keep it going forever)."""
    keys: list[Any] = []
    for item in items:
        assert key(item) not in keys, f"{key(item)} came again after {keys}"
        keys.append(key(item))
    return keys


def build_world(system: System, llm: FakeOpenAI, tag: str) -> dict[str, Any]:
    client = system.client()
    label = f"shared-{tag}"
    agents = [
        client.agents.create(
            name=f"{tag}-{i}",
            model="openai/gpt-4o-mini",
            tags=[tag, f"{tag}-{i}"],
            memory_blocks=[
                {"label": name, "value": f"{name} of {i}"} for name in ("a", "b", "c", "d")
            ],
        ).id
        for i in range(3)
    ]
    blocks = [client.blocks.create(label=label, value=f"v{i}").id for i in range(3)]
    for agent_id in agents:
        client.agents.blocks.attach(blocks[0], agent_id=agent_id)
    main = agents[0]
    # Two runs: the first takes two steps (a tool call, then the answer).
    llm.push(Reply(tool_calls=[("conversation_search", {"query": "tea"})]), Reply(content="No."))
    client.agents.messages.create(main, messages=[{"role": "user", "content": "tea?"}])
    client.agents.messages.create(main, messages=[{"role": "user", "content": "coffee?"}])
    return {"client": client, "agents": agents, "blocks": blocks, "label": label, "main": main}


def check_every_route(world: dict[str, Any]) -> None:
    client: Letta = world["client"]
    agents, blocks, main = world["agents"], world["blocks"], world["main"]
    tag = client.agents.retrieve(main).tags[0]
    for order in ORDERS:
        oldest_first = order == "asc"

        def ordered(ids: list[str], asc: bool = oldest_first) -> list[str]:
            return ids if asc else ids[::-1]

        got = walked(client.agents.list(tags=[tag], limit=1, order=order))
        assert got == ordered(agents)
        got = walked(client.blocks.list(label=world["label"], limit=1, order=order))
        assert got == ordered(blocks)
        got = walked(client.blocks.agents.list(blocks[0], limit=1, order=order))
        assert got == ordered(agents)

        mine = client.agents.retrieve(main, include=["agent.blocks", "agent.tools"])
        # Letta orders an agent's blocks by id.
        by_id = sorted(b.id for b in mine.blocks if b.id is not None)
        got = walked(client.agents.blocks.list(main, limit=1, order=order))
        assert got == ordered(by_id)
        got = walked(client.agents.tools.list(main, limit=1, order=order))
        assert sorted(got) == sorted(t.id for t in mine.tools) and len(got) >= 3

        everything = [t.id for t in client.tools.list(limit=1000, order=order).items]
        assert walked(client.tools.list(limit=2, order=order)) == everything

        runs = walked(client.runs.list(agent_id=main, limit=1, order=order))
        assert len(runs) == 2
        first_run = runs[0] if oldest_first else runs[1]
        steps = walked(client.runs.steps.list(first_run, limit=1, order=order))
        assert len(steps) == 2
        assert walked(client.steps.list(agent_id=main, limit=1, order=order)) == ordered(
            walked(client.steps.list(agent_id=main, limit=100, order="asc").items)
        )
        # One stored message may show as several (a tool call and its reasoning),
        # sharing its id: such an item is known by its id and type.
        shown = walked(
            client.runs.messages.list(first_run, limit=1, order=order),
            key=lambda m: (m.id, m.message_type),
        )
        assert {t for _, t in shown} >= {"user_message", "tool_call_message"}

    # An agent's messages: `after` is always newer (Letta's), so the SDK walks them
    # oldest first; newest first, one page holds the newest, oldest first within it.
    history = walked(
        client.agents.messages.list(main, limit=1, order="asc"),
        key=lambda m: (m.id, m.message_type),
    )
    contents = [getattr(m, "content", None) for m in client.agents.messages.list(main).items]
    assert [c for c in contents if c in ("tea?", "coffee?")] == ["tea?", "coffee?"]
    newest = client.agents.messages.list(main, limit=2, order="desc").items
    assert [(m.id, m.message_type) for m in newest] == history[-2:]
    # ...and across all agents the same way. (letta-client 1.12 gives this route no
    # paging, so the pages are walked here: every test's messages are in them.)
    everywhere: list[tuple[str, str]] = []
    after: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 25, "order": "asc"}
        if after is not None:
            params["after"] = after
        page = client.get("/v1/messages/", cast_to=object, options={"params": params})
        assert isinstance(page, list)
        if not page:
            break
        everywhere += [(m["id"], m["message_type"]) for m in page]
        after = page[-1]["id"]
    assert len(everywhere) == len(set(everywhere))
    assert [k for k in everywhere if k in set(history)] == history


async def test_every_list_route_pages_once_through_the_sdk(system: System, llm: FakeOpenAI) -> None:
    tag = f"listing-{uuid.uuid4().hex[:8]}"
    world = await asyncio.to_thread(build_world, system, llm, tag)
    await asyncio.to_thread(check_every_route, world)


async def test_a_cursor_naming_nothing_is_ignored(system: System) -> None:
    """As in Letta's agents, blocks and runs lists: a client deleting while it pages
    is not stopped by a 404 for the row it just deleted."""
    http = system.http
    tag = f"gone-{uuid.uuid4().hex[:8]}"
    kept = await new_agent(system, tags=[tag])
    gone = await new_agent(system, tags=[tag])
    assert (await http.delete(f"/v1/agents/{gone['id']}")).status_code == 200
    for path, params in (
        ("/v1/agents/", {"tags": tag}),
        ("/v1/blocks/", {"label": "human"}),
        ("/v1/runs/", {"agent_id": kept["id"]}),
        (f"/v1/agents/{kept['id']}/core-memory/blocks", {}),
        (f"/v1/agents/{kept['id']}/tools", {}),
        ("/v1/tools/", {}),
    ):
        plain = await http.get(path, params=params)
        for cursor in ("after", "before"):
            paged = await http.get(path, params={**params, cursor: gone["id"]})
            assert paged.status_code == 200, (path, paged.text)
            assert paged.json() == plain.json(), path
    # Letta's list of all messages answers 404 for a message that is not there.
    missing = f"message-{uuid.uuid4()}"
    listed = await http.get("/v1/messages/", params={"after": missing})
    assert listed.status_code == 404 and missing in listed.json()["detail"]


async def test_a_message_steps_and_counts(system: System, llm: FakeOpenAI) -> None:
    http = system.http
    label = f"count-{uuid.uuid4().hex[:8]}"
    agent = await new_agent(
        system,
        tags=[label],
        memory_blocks=[{"label": label, "value": "x"}, {"label": "persona", "value": "p"}],
    )
    llm.push(Reply(content="Hello there."))
    reply = (await http.post(f"/v1/agents/{agent['id']}/messages", json={"input": "hi"})).json()
    answer = reply["messages"][-1]
    client = system.client()

    def reads() -> tuple[Any, Any, Any]:
        return (
            client.messages.retrieve(answer["id"]),
            client.steps.list(agent_id=agent["id"]),
            client.steps.list(agent_id=agent["id"], model="gpt-4o-mini"),
        )

    (retrieved, steps, by_model) = await asyncio.to_thread(reads)
    assert [(m.id, m.message_type, m.content) for m in retrieved] == [
        (answer["id"], "assistant_message", "Hello there.")
    ]
    (step,) = steps.items
    assert step.agent_id == agent["id"] and step.run_id == answer["run_id"]
    assert [s.id for s in by_model.items] == [step.id]
    assert (
        await http.get("/v1/steps/", params={"agent_id": agent["id"], "model": "x"})
    ).json() == []
    unknown = await http.get(f"/v1/messages/message-{uuid.uuid4()}")
    assert unknown.status_code == 404
    bad_date = await http.get("/v1/steps/", params={"start_date": "yesterday"})
    assert bad_date.status_code == 422 and "start_date" in bad_date.json()["detail"]

    assert (await http.get("/v1/blocks/count", params={"label": label})).json() == 1
    total = (await http.get("/v1/blocks/count")).json()
    assert total >= 2 and total == len((await http.get("/v1/blocks/?limit=1000")).json())
    assert (await http.get("/v1/agents/count", params={"tags": label})).json() == 1
    unknown_block = await http.get(f"/v1/blocks/block-{uuid.uuid4()}/agents")
    assert unknown_block.status_code == 404


async def test_tags_of_agents_and_blocks_page_by_name(system: System) -> None:
    stem = f"tg{uuid.uuid4().hex[:6]}"
    await new_agent(system, tags=[f"{stem}-b", f"{stem}-a"])
    await new_agent(system, tags=[f"{stem}-b", f"{stem}-d"])
    made = await system.http.post(
        "/v1/blocks/", json={"label": "tagged", "value": "", "tags": [f"{stem}-c"]}
    )
    assert made.status_code == 200, made.text
    client = system.client()

    def tags(**params: Any) -> list[str]:
        listed: list[str] = client.tags.list(name=stem, **params)
        return listed

    every = [f"{stem}-{x}" for x in "abcd"]
    assert await asyncio.to_thread(tags) == every
    assert await asyncio.to_thread(tags, limit=2) == every[:2]
    assert await asyncio.to_thread(tags, after=f"{stem}-b", limit=2) == every[2:]
    assert await asyncio.to_thread(tags, order="desc", after=f"{stem}-c") == every[1::-1]
    assert await asyncio.to_thread(tags, before=f"{stem}-c") == every[:2]
    # A cursor is a place in name order, whether or not a tag by that name exists.
    assert await asyncio.to_thread(tags, after=f"{stem}-bb") == every[2:]


def refuse_invalid_input(client: Letta, agent_id: str) -> None:
    block = client.blocks.create(label="small", value="ok", limit=10)
    with pytest.raises(UnprocessableEntityError, match="limit"):
        client.blocks.update(block.id, value="testing testing testing")
    assert client.blocks.retrieve(block.id).value == "ok"

    runs_before = client.runs.list(agent_id=agent_id).items
    with pytest.raises(
        UnprocessableEntityError, match="Cannot specify both 'input' and 'messages'"
    ):
        client.agents.messages.create(
            agent_id, input="hello", messages=[{"role": "user", "content": "hello"}]
        )
    assert client.runs.list(agent_id=agent_id).items == runs_before


async def test_validation_refusals_are_422_and_change_nothing(system: System) -> None:
    agent = await new_agent(system)
    await asyncio.to_thread(refuse_invalid_input, system.client(), agent["id"])
