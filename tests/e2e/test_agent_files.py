"""Agent files end to end: an agent exported from O and imported again is the same agent
(through the official SDK), the published example files import and answer, and bad or
hostile files are refused whole with nothing written to the log."""

from __future__ import annotations

import asyncio
import gzip
import json
import uuid
from pathlib import Path
from typing import Any

import nats
import pytest

from o_contracts import subjects
from tests.e2e.conftest import System
from tests.e2e.folder_support import processed
from tests.e2e.support import event_types, log_end, send
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.servers import operator

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agent_files"
EXAMPLES = sorted(p.name.removesuffix(".af.gz") for p in FIXTURES.glob("*.af.gz"))

WEATHER = '''
def trip_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: The city to look up.
    """
    return f"Sunny in {city}"
'''


def example(name: str) -> bytes:
    return gzip.decompress((FIXTURES / f"{name}.af.gz").read_bytes())


async def import_file(
    system: System, data: bytes, headers: dict[str, str] | None = None, **form: Any
) -> Any:
    return await system.http.post(
        "/v1/agents/import",
        files={"file": ("agent.af", data, "application/json")},
        data={k: str(v).lower() if isinstance(v, bool) else v for k, v in form.items()},
        headers=headers or {},
    )


async def messages_of(system: System, agent_id: str) -> list[dict[str, Any]]:
    response = await system.http.get(
        f"/v1/agents/{agent_id}/messages", params={"order": "asc", "limit": 1000}
    )
    assert response.status_code == 200, response.text
    out: list[dict[str, Any]] = response.json()
    return out


def shown(message: dict[str, Any]) -> dict[str, Any]:
    """A listed message without what differs between two agents (ids, run and step)."""
    dropped = ("id", "run_id", "step_id", "otid", "sender_id", "seq_id")
    kept = {k: v for k, v in message.items() if k not in dropped}
    if message["message_type"] == "system_message":
        # Compiled anew by the import (docs/agent-files.md, "Messages"): with the agent's
        # own id, the time, and dated when the imported agent was created.
        kept.pop("content")
        kept.pop("date")
    return kept


async def test_an_agent_exported_and_imported_is_the_same_agent(
    system: System, llm: FakeOpenAI
) -> None:
    client = system.client()
    tool = await asyncio.to_thread(client.tools.create, source_code=WEATHER)
    agent = await asyncio.to_thread(
        client.agents.create,
        name="traveller",
        model="openai/gpt-4o-mini",
        system="You plan trips.",
        memory_blocks=[
            {"label": "human", "value": "Name: Ada", "limit": 500},
            {"label": "persona", "value": "Careful.", "description": "who I am"},
        ],
        tool_ids=[tool.id],
        tool_rules=[
            {"type": "max_count_per_step", "tool_name": "trip_weather", "max_count_limit": 2}
        ],
        tags=["travel"],
        description="trip planner",
        metadata={"team": "a"},
        model_settings={"provider_type": "openai", "temperature": 0.25, "max_output_tokens": 700},
        secrets={"WEATHER_KEY": "k-1"},
    )
    llm.push(Reply(tool_calls=[("trip_weather", {"city": "Paris"})]), Reply(content="Sunny, go."))
    await send(system, agent.id, "Weather in Paris?")
    exported = await asyncio.to_thread(client.agents.export_file, agent.id)
    document = json.loads(exported)
    assert [a["name"] for a in document["agents"]] == ["traveller"]
    (entry,) = document["agents"]
    assert entry["secrets"] == {"WEATHER_KEY": ""}  # names only, never values
    assert [t["name"] for t in document["tools"] if t["source_code"]] == ["trip_weather"]
    assert entry["in_context_message_ids"][0] == entry["messages"][0]["id"]

    imported = await asyncio.to_thread(
        client.agents.import_file,
        file=("traveller.af", exported.encode()),
        append_copy_suffix=False,
        secrets=json.dumps({"WEATHER_KEY": "k-2"}),
    )
    (copy_id,) = imported.agent_ids
    assert copy_id != agent.id
    before, after = await asyncio.gather(
        asyncio.to_thread(client.agents.retrieve, agent.id),
        asyncio.to_thread(client.agents.retrieve, copy_id),
    )
    same = (
        "name",
        "system",
        "agent_type",
        "llm_config",
        "embedding_config",
        "model",
        "model_settings",
        "tool_rules",
        "tags",
        "description",
        "metadata",
        "timezone",
    )
    assert {k: getattr(after, k) for k in same} == {k: getattr(before, k) for k in same}
    assert (after.llm_config.temperature, after.llm_config.max_tokens) == (0.25, 700)

    def blocks(state: Any) -> list[tuple[Any, ...]]:
        return [(b.label, b.value, b.limit, b.description, b.read_only) for b in state.blocks]

    assert blocks(after) == blocks(before)
    assert [b.id for b in after.blocks] != [b.id for b in before.blocks]
    # The same tool (found by name, unchanged), with its source; the secret's new value.
    assert [(t.id, t.source_code) for t in after.tools if t.tool_type == "custom"] == [
        (tool.id, WEATHER)
    ]
    assert sorted(t.name for t in after.tools) == sorted(t.name for t in before.tools)
    assert [s.key for s in after.secrets or []] == ["WEATHER_KEY"]
    # The conversation: every message, in order, with its date and content.
    old, new = await asyncio.gather(messages_of(system, agent.id), messages_of(system, copy_id))
    assert [shown(m) for m in new] == [shown(m) for m in old]
    assert [m["message_type"] for m in new] == [
        "system_message",
        "user_message",
        "tool_call_message",
        "tool_return_message",
        "assistant_message",
    ]
    assert len(after.message_ids or []) == len(before.message_ids or [])

    # The copy goes on from there: the model sees the same conversation from both.
    llm.reset()
    await send(system, agent.id, "And tomorrow?")
    await send(system, copy_id, "And tomorrow?")
    original, continued = (r["messages"][1:] for r in llm.requests)
    assert continued == original
    assert [m["role"] for m in continued] == ["user", "assistant", "tool", "assistant", "user"]


async def test_a_retried_import_is_one_import(system: System, llm: FakeOpenAI) -> None:
    data = example("lettabot-builder")
    key = {"Idempotency-Key": "import-lettabot-builder-1"}
    first = await import_file(system, data, key, model="openai/gpt-4o-mini")
    assert first.status_code == 200, first.text
    end = await log_end(system)
    again = await import_file(system, data, key, model="openai/gpt-4o-mini")
    assert again.status_code == 200, again.text
    assert again.json()["agent_ids"] == first.json()["agent_ids"]
    assert await log_end(system) == end  # nothing written twice
    companion = first.json()["agent_ids"][1]
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        types = [t for _, t in await event_types(nc, subjects.agent_subject(companion))]
    finally:
        await nc.close()
    # 187 messages in two parts (one event holds at most 499, and 640 KiB).
    assert types == ["AgentCreated", "MessagesImported", "MessagesImported"]
    listed = await messages_of(system, companion)
    # Its own system message and the file's 187 others, each listed once or in parts
    # (reasoning, tool call), as Letta lists a stored message.
    assert len({m["id"] for m in listed}) == 1 + 187
    assert len(listed) == 312


async def test_a_retried_import_leaves_a_tool_edited_since_as_it_is(
    system: System, llm: FakeOpenAI
) -> None:
    """An import retried under its Idempotency-Key after one of its tools was edited: the
    retry is answered, and the edit stays. (The retry used to take the tool its first try
    wrote for one it met, and override it with the file's source again.)"""
    data = example("customer_service")
    key = {"Idempotency-Key": f"import-edited-{uuid.uuid4().hex}"}
    first = await import_file(system, data, key)
    assert first.status_code == 200, first.text
    (agent_id,) = first.json()["agent_ids"]
    agent = (await system.http.get(f"/v1/agents/{agent_id}")).json()
    tool_id = next(t["id"] for t in agent["tools"] if t["name"] == "escalate")
    edited = await system.http.patch(f"/v1/tools/{tool_id}", json={"source_code": ESCALATE_CHANGED})
    assert edited.status_code == 200, edited.text
    end = await log_end(system)
    again = await import_file(system, data, key)
    assert again.status_code == 200, again.text
    assert again.json()["agent_ids"] == [agent_id]
    assert (await system.http.get(f"/v1/tools/{tool_id}")).json()["source_code"] == ESCALATE_CHANGED
    assert await log_end(system) == end  # nothing written again


async def test_import_options_as_letta_reads_them(system: System, llm: FakeOpenAI) -> None:
    data = example("customer_service")
    plain = await import_file(system, data)
    assert plain.status_code == 200, plain.text
    (agent_id,) = plain.json()["agent_ids"]
    agent = (await system.http.get(f"/v1/agents/{agent_id}")).json()
    assert agent["name"] == "customer_service_copy"  # append_copy_suffix: Letta's default
    assert agent["llm_config"]["handle"] == "openai/gpt-4o-mini"
    custom = sorted(t["name"] for t in agent["tools"] if t["tool_type"] == "custom")
    assert custom == ["cancel_order", "check_order_status", "escalate", "terminate_chat"]
    tool_id = next(t["id"] for t in agent["tools"] if t["name"] == "escalate")
    changed = await system.http.patch(
        f"/v1/tools/{tool_id}", json={"source_code": ESCALATE_CHANGED}
    )
    assert changed.status_code == 200, changed.text

    # override_existing_tools=false keeps the changed tool; name, model and strip apply.
    kept = await import_file(
        system,
        data,
        override_existing_tools=False,
        name="support",
        model="anthropic/claude-sonnet-4-5",
        strip_messages=True,
        project_id="proj-1",
    )
    assert kept.status_code == 200, kept.text
    (kept_id,) = kept.json()["agent_ids"]
    kept_agent = (await system.http.get(f"/v1/agents/{kept_id}")).json()
    assert kept_agent["name"] == "support"
    assert kept_agent["llm_config"]["handle"] == "anthropic/claude-sonnet-4-5"
    escalate = next(t for t in kept_agent["tools"] if t["name"] == "escalate")
    assert escalate["id"] == tool_id and escalate["source_code"] == ESCALATE_CHANGED
    assert [m["message_type"] for m in await messages_of(system, kept_id)] == ["system_message"]

    # By default the file's tool replaces it again (Letta's override_existing_tools=true).
    await import_file(system, data)
    tool = (await system.http.get(f"/v1/tools/{tool_id}")).json()
    assert tool["source_code"] != ESCALATE_CHANGED


ESCALATE_CHANGED = '''
def escalate(reason: str) -> str:
    """Escalate the conversation.

    Args:
        reason: Why.
    """
    return "changed"
'''


# The examples' models O's tests serve (OpenAI and Anthropic fakes); the others are
# imported with `model` set, as a user of a server without those providers would.
NEEDS_MODEL = {"lettabot": "zai/glm-5", "void": "gemini-something/gemini-2.5-pro"}


@pytest.mark.parametrize("name", EXAMPLES)
async def test_each_published_example_imports_and_answers(
    system: System, llm: FakeOpenAI, claude: FakeAnthropic, name: str
) -> None:
    data = example(name)
    document = json.loads(data)
    if isinstance(document, str):
        document = json.loads(document)
    form: dict[str, Any] = {}
    if name in NEEDS_MODEL:
        refused = await import_file(system, data)
        assert refused.status_code == 400
        assert NEEDS_MODEL[name].split("/")[0] in refused.json()["detail"]
        form["model"] = "openai/gpt-4o-mini"
    response = await import_file(system, data, **form)
    assert response.status_code == 200, response.text
    body = response.json()
    assert len(body["agent_ids"]) == len(document["agents"])
    for agent_id, entry in zip(body["agent_ids"], document["agents"], strict=True):
        agent = (await system.http.get(f"/v1/agents/{agent_id}")).json()
        file_blocks = {b["id"]: b for b in document["blocks"]}
        assert [b["label"] for b in agent["blocks"]] == [
            file_blocks[b]["label"] for b in entry["block_ids"]
        ]
        assert agent["system"] == entry["system"]
        # Its folders, with the files the example holds processed again from their text.
        folders = (await system.http.get(f"/v1/agents/{agent_id}/folders")).json()
        assert len(folders) == len(set(entry.get("source_ids") or []))
        for folder in folders:
            files = (await system.http.get(f"/v1/folders/{folder['id']}/files")).json()
            for file in files:
                done = await processed(system, folder["id"], file["id"])
                assert done["processing_status"] == "completed", done
    primary = body["agent_ids"][0]
    if document["agents"][0]["agent_type"] == "memgpt_agent":
        # It speaks through send_message; its first call must be archival_memory_search.
        llm.push(
            Reply(
                tool_calls=[
                    ("archival_memory_search", {"query": "hello", "request_heartbeat": True})
                ]
            ),
            Reply(tool_calls=[("send_message", {"message": "Hello from the archive."})]),
        )
    reply = await send(system, primary, "hello there")
    assert reply["stop_reason"]["stop_reason"] in ("end_turn", "tool_rule", "no_tool_call")
    said = [m for m in reply["messages"] if m["message_type"] == "assistant_message"]
    assert said, reply["messages"]


async def test_hostile_files_are_refused_whole(system: System, llm: FakeOpenAI) -> None:
    good = json.loads(example("customer_service"))
    good = json.loads(good) if isinstance(good, str) else good

    def changed(change: Any) -> bytes:
        document = json.loads(json.dumps(good))
        change(document)
        return json.dumps(document).encode()

    def bad_source(d: dict[str, Any]) -> None:
        d["tools"][0]["source_code"] = "def cancel_order(:\n    pass"

    def missing_block(d: dict[str, Any]) -> None:
        d["agents"][0]["block_ids"].append("block-99")

    def nul(d: dict[str, Any]) -> None:
        d["blocks"][0]["value"] = "a\u0000b"

    def agent_type(d: dict[str, Any]) -> None:
        d["agents"][0]["agent_type"] = "voice_convo_agent"

    def no_id(d: dict[str, Any]) -> None:
        del d["agents"][0]["id"]

    def unanswered_context(d: dict[str, Any]) -> None:
        d["agents"][0]["in_context_message_ids"].append("message-404")

    def bad_rule(d: dict[str, Any]) -> None:
        tool = d["tools"][0]["name"]
        d["agents"][0]["tool_rules"] = [{"type": "max_count_per_step", "tool_name": tool}]

    cases = [
        (b"{not json", 400, "Corrupted agent file format."),
        (json.dumps({"name": "old", "tools": []}).encode(), 400, "Legacy AgentSchema"),
        (changed(no_id), 422, "id"),
        (changed(bad_source), 422, "source_code does not parse"),
        (changed(missing_block), 422, "block 'block-99'"),
        (changed(nul), 422, "NUL"),
        (changed(agent_type), 422, "voice_convo_agent"),
        (changed(unanswered_context), 422, "message 'message-404'"),
        (changed(bad_rule), 422, "max_count_limit must be a positive integer"),
    ]
    start = await log_end(system)
    for data, status, detail in cases:
        response = await import_file(system, data)
        assert response.status_code == status, (detail, response.text)
        assert detail in json.dumps(response.json()["detail"]), response.text
    # Over O_MAX_BODY_BYTES (4 MiB): 413 before it is read.
    huge = changed(lambda d: d["agents"][0].update(description="x" * 100, padding="y" * (5 << 20)))
    response = await import_file(system, huge)
    assert response.status_code == 413, response.text
    # Nothing of any of them is in the log: no tool, block, agent or message.
    assert await log_end(system) == start


async def test_export_options(system: System, llm: FakeOpenAI) -> None:
    client = system.client()
    agent = await asyncio.to_thread(client.agents.create, model="openai/gpt-4o-mini")
    await send(system, agent.id, "first words")
    scrubbed = json.loads(
        await asyncio.to_thread(client.agents.export_file, agent.id, scrub_messages=True)
    )
    assert scrubbed["agents"][0]["messages"] == []
    assert scrubbed["agents"][0]["in_context_message_ids"] == []
    legacy = await system.http.get(
        f"/v1/agents/{agent.id}/export", params={"use_legacy_format": "true"}
    )
    assert legacy.status_code == 400
    conversation = await system.http.post("/v1/conversations/", params={"agent_id": agent.id})
    assert conversation.status_code == 200, conversation.text
    conversation_id = conversation.json()["id"]
    response = await system.http.post(
        f"/v1/conversations/{conversation_id}/messages",
        json={
            "messages": [{"role": "user", "content": "in the side conversation"}],
            "streaming": False,
        },
    )
    assert response.status_code == 200, response.text
    side = await system.http.post(
        f"/v1/agents/{agent.id}/export",
        json={
            "conversation_id": conversation_id,
            "skills": [{"name": "notes", "files": {"SKILL.md": "# Notes"}}],
        },
    )
    assert side.status_code == 200, side.text
    document = side.json()
    texts = [
        part["text"]
        for m in document["agents"][0]["messages"]
        if m["role"] == "user"
        for part in m["content"]
    ]
    assert texts == ["in the side conversation"]
    assert document["skills"] == [
        {"name": "notes", "files": {"SKILL.md": "# Notes"}, "source_url": None}
    ]
    missing = await system.http.get(f"/v1/agents/{agent.id.replace('agent-', 'agent-0')}/export")
    assert missing.status_code in (404, 422)
