"""Conversations through the official SDK: many per agent, each with its own messages and
run order, all sharing the agent's memory (Letta's /v1/conversations)."""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import letta_client
import pytest

from o_contracts.system_prompt import recompiled_at
from tests.e2e.conftest import System
from tests.e2e.folder_support import new_folder
from tests.e2e.support import new_agent, new_conversation, until
from tests.e2e.support import send as send_default
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e


def said(chunks: list[Any]) -> list[str]:
    return [c.content for c in chunks if getattr(c, "message_type", None) == "assistant_message"]


def send(client: letta_client.Letta, conversation_id: str, text: str, **extra: Any) -> list[Any]:
    """A message to the conversation, streamed (the route's default), read to the end."""
    stream = client.conversations.messages.create(
        conversation_id, messages=[{"role": "user", "content": text}], **extra
    )
    return list(stream)


def prompt_of(request: dict[str, Any]) -> str:
    return str(request["messages"][0]["content"])


async def test_a_new_agent_and_a_new_conversation_open_with_a_system_message(
    system: System,
) -> None:
    agent = await new_agent(
        system,
        initial_message_sequence=[
            {"role": "assistant", "content": "Hello, how are you?"},
            {"role": "user", "content": "I'm good, and you?"},
        ],
    )
    client = system.client()
    # The default conversation: system prompt, then the initial sequence.
    history = client.agents.messages.list(agent["id"]).items
    assert [m.message_type for m in history] == [
        "system_message",
        "assistant_message",
        "user_message",
    ]
    assert agent["message_ids"] == [m.id for m in history]
    assert "- CONVERSATION_ID: default" in history[0].content
    assert "Name: Sam" in history[0].content
    conversation = client.conversations.create(agent_id=agent["id"])
    assert conversation.id.startswith("conv-") and conversation.agent_id == agent["id"]
    assert len(conversation.in_context_message_ids) == 1
    (first,) = client.conversations.messages.list(conversation.id, order="asc").items
    assert first.message_type == "system_message"
    assert f"- CONVERSATION_ID: {conversation.id}" in first.content


async def test_conversations_are_isolated_but_share_memory(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    client = system.client()
    apple = client.conversations.create(agent_id=agent["id"])
    banana = client.conversations.create(agent_id=agent["id"])
    llm.push(Reply(content="noted apple"), Reply(content="noted banana"))
    streamed = send(client, apple.id, "remember APPLE")
    assert said(streamed) == ["noted apple"]
    assert {c.conversation_id for c in streamed if hasattr(c, "otid")} == {apple.id}
    assert said(send(client, banana.id, "remember BANANA")) == ["noted banana"]
    # Each conversation's next request carries only its own history.
    llm.push(Reply(content="APPLE"))
    send(client, apple.id, "which word?")
    texts = [m.get("content") for m in llm.requests[-1]["messages"][1:]]
    assert texts == ["remember APPLE", "noted apple", "which word?"]
    assert f"- CONVERSATION_ID: {apple.id}" in prompt_of(llm.requests[-1])
    # Memory is the agent's: a block edit shows in every conversation's next prompt.
    client.agents.blocks.update("human", agent_id=agent["id"], value="Name: Sam Stone")
    llm.push(Reply(content="ok"))
    send(client, banana.id, "and now?")
    assert "Name: Sam Stone" in prompt_of(llm.requests[-1])
    # Listing: newest first by default; asc starts with the system message.
    newest = client.conversations.messages.list(apple.id).items
    assert newest[0].message_type == "assistant_message" and newest[0].content == "APPLE"
    assert {m.conversation_id for m in newest} == {apple.id}
    oldest = client.conversations.messages.list(apple.id, order="asc").items
    assert [m.message_type for m in oldest][:2] == ["system_message", "user_message"]
    # The agent's own (default) conversation saw none of it.
    default = client.agents.messages.list(agent["id"], conversation_id="default").items
    assert [m.message_type for m in default] == ["system_message"]
    listed = [c.id for c in client.conversations.list(agent_id=agent["id"])]
    assert set(listed) == {apple.id, banana.id}


async def test_pages_walk_a_conversation_once(system: System, llm: FakeOpenAI) -> None:
    _agent, client, conversation = await new_conversation(system)
    for i in range(3):
        llm.push(Reply(content=f"answer {i}"))
        send(client, conversation.id, f"question {i}")
    everything = [m.id for m in client.conversations.messages.list(conversation.id, order="asc")]
    assert len(everything) == 7
    for order in ("asc", "desc"):
        page = client.conversations.messages.list(conversation.id, order=order, limit=2)
        walked = [m.id for m in page]  # the SDK follows `after` page by page
        assert walked == (everything if order == "asc" else everything[::-1])
    # before/after follow the order; an unknown cursor is ignored (as Letta does).
    before_last = client.conversations.messages.list(
        conversation.id, order="asc", before=everything[-1]
    ).items
    assert [m.id for m in before_last] == everything[:-1]
    unknown = "message-00000000-0000-4000-8000-000000000000"
    assert len(client.conversations.messages.list(conversation.id, after=unknown).items) == 7


async def test_listings_take_lettas_default_and_message_types(
    system: System, llm: FakeOpenAI
) -> None:
    """Letta Code lists an agent's default conversation as `conversation_id=default`, and
    asks a listing for the message types it shows (Letta filters the page once read)."""
    agent = await new_agent(system)
    client = system.client()
    other = client.conversations.create(agent_id=agent["id"])
    llm.push(Reply(content="default answer"), Reply(content="other answer"))
    await send_default(system, agent["id"], "in the default")
    send(client, other.id, "in the other")
    default = client.agents.messages.list(agent["id"], conversation_id="default", order="asc")
    assert [m.message_type for m in default.items] == [
        "system_message",
        "user_message",
        "assistant_message",
    ]
    by_agent_id = client.agents.messages.list(
        agent["id"], conversation_id=agent["id"], order="asc"
    ).items
    assert [m.id for m in by_agent_id] == [m.id for m in default.items]
    # No conversation named: every conversation's messages, interleaved, as Letta lists them.
    everything = client.agents.messages.list(agent["id"], order="asc").items
    assert [(m.message_type, m.conversation_id) for m in everything] == [
        ("system_message", None),
        ("system_message", other.id),
        ("user_message", None),
        ("assistant_message", None),
        ("user_message", other.id),
        ("assistant_message", other.id),
    ]
    newest = client.agents.messages.list(agent["id"], limit=2).items
    assert [m.id for m in newest] == [m.id for m in everything[-2:]]
    users = client.agents.messages.list(
        agent["id"], conversation_id="default", include_return_message_types=["user_message"]
    ).items
    assert [m.content for m in users] == ["in the default"]
    spoken = client.conversations.messages.list(
        other.id, include_return_message_types=["assistant_message", "user_message"]
    ).items
    assert [m.message_type for m in spoken] == ["assistant_message", "user_message"]
    assert spoken[0].content == "other answer"
    # The filter applies to the page as read: two messages read, one of them shown.
    newest_two = client.agents.messages.list(
        agent["id"],
        conversation_id="default",
        limit=2,
        include_return_message_types=["assistant_message"],
    ).items
    assert [m.content for m in newest_two] == ["default answer"]
    bad = await system.http.get(
        f"/v1/agents/{agent['id']}/messages", params={"include_return_message_types": "nope"}
    )
    assert bad.status_code == 422 and "include_return_message_types" in bad.text, bad.text


async def test_fork_shares_the_source_messages(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    client = system.client()
    source = client.conversations.create(agent_id=agent["id"])
    llm.push(Reply(content="red it is"))
    send(client, source.id, "my favourite colour is red")
    fork = client.conversations.fork(source.id)
    assert fork.id != source.id
    llm.push(Reply(content="red"))
    send(client, fork.id, "what is my favourite colour?")
    texts = [m.get("content") for m in llm.requests[-1]["messages"][1:]]
    assert texts == ["my favourite colour is red", "red it is", "what is my favourite colour?"]
    source_ids = [m.id for m in client.conversations.messages.list(source.id, order="asc")]
    fork_ids = [m.id for m in client.conversations.messages.list(fork.id, order="asc")]
    assert source_ids[0] != fork_ids[0]  # each its own system message
    assert fork_ids[1:3] == source_ids[1:]  # then the same messages, shared
    assert len(client.conversations.messages.list(source.id).items) == 3  # the source is as it was
    # The default conversation forks too ("default" with the agent's id).
    response = await system.http.post(
        "/v1/conversations/default/fork", params={"agent_id": agent["id"]}
    )
    assert response.status_code == 200, response.text
    assert response.json()["id"].startswith("conv-")


async def test_a_second_message_while_a_run_is_in_progress_is_refused(
    system: System, llm: FakeOpenAI
) -> None:
    agent, client, conversation = await new_conversation(system)
    release = threading.Event()
    llm.push(Reply(content="slow answer", release=release), Reply(content="next"))
    first = asyncio.create_task(asyncio.to_thread(send, client, conversation.id, "first"))
    await until(llm, lambda requests: any("first" in str(r["messages"]) for r in requests))
    with pytest.raises(letta_client.ConflictError) as refused:
        send(client, conversation.id, "second")
    busy = refused.value.body
    assert isinstance(busy, dict) and busy["run_id"].startswith("run-")
    assert "currently being processed" in busy["detail"]
    # The SDK is told not to retry it (it would, twice, for a 409).
    assert refused.value.response.headers["x-should-retry"] == "false"
    # Other conversations of the agent are not held up.
    other = client.conversations.create(agent_id=agent["id"])
    assert said(send(client, other.id, "elsewhere")) == ["next"]
    release.set()
    assert said(await first) == ["slow answer"]
    # Once the run is done the conversation takes messages again; the refused one left nothing.
    llm.push(Reply(content="third"))
    assert said(send(client, conversation.id, "third")) == ["third"]
    contents = [m.content for m in client.conversations.messages.list(conversation.id, order="asc")]
    assert "second" not in contents


async def test_of_two_messages_sent_at_once_one_runs_and_the_other_is_refused(
    system: System, llm: FakeOpenAI
) -> None:
    # Letta's test_concurrent_messages_to_same_conversation, with the run held so that it
    # is in progress whichever request is admitted first.
    _agent, client, conversation = await new_conversation(system)
    release = threading.Event()
    llm.push(Reply(content="the one", release=release))

    def attempt(text: str) -> str:
        try:
            send(client, conversation.id, text)
        except letta_client.ConflictError:
            return "refused"
        return "ran"

    both = [asyncio.to_thread(attempt, text) for text in ("one", "two")]
    tasks = [asyncio.create_task(b) for b in both]
    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    assert [t.result() for t in done] == ["refused"]
    release.set()
    assert sorted([await t for t in tasks]) == ["ran", "refused"]
    assert len(llm.requests) == 1


async def test_a_retry_with_the_same_otid_follows_the_same_run(
    system: System, llm: FakeOpenAI
) -> None:
    _agent, client, conversation = await new_conversation(system)
    llm.push(Reply(content="once"))
    message = {"role": "user", "content": "hello", "otid": "otid-retry-1"}
    first = list(client.conversations.messages.create(conversation.id, messages=[message]))
    again = list(client.conversations.messages.create(conversation.id, messages=[message]))
    assert said(first) == said(again) == ["once"]
    runs = {getattr(c, "run_id", None) for c in first + again} - {None}
    assert len(runs) == 1
    # The run belongs to the conversation (and is listed under it).
    (run_id,) = runs
    assert client.runs.retrieve(run_id).conversation_id == conversation.id
    listed = client.runs.list(conversation_id=conversation.id).items
    assert [r.id for r in listed] == [run_id]
    assert len(client.conversations.messages.list(conversation.id).items) == 3


async def test_cancel_recompile_compact_delete(system: System, llm: FakeOpenAI) -> None:
    agent, client, conversation = await new_conversation(system)
    with pytest.raises(letta_client.ConflictError):
        client.conversations.cancel(conversation.id)
    for i in range(3):
        llm.push(Reply(content=f"answer {i}"))
        send(client, conversation.id, f"question {i}")
    # Recompile: the system message shows memory as it is now (dry run: only returned).
    client.agents.blocks.update("human", agent_id=agent["id"], value="Name: Ada")
    dry = await system.http.post(
        f"/v1/conversations/{conversation.id}/recompile", params={"dry_run": "true"}
    )
    assert dry.status_code == 200 and "Name: Ada" in dry.json()
    first = client.conversations.messages.list(conversation.id, order="asc").items[0]
    assert "Name: Ada" not in first.content
    done = await system.http.post(f"/v1/conversations/{conversation.id}/recompile")
    assert done.status_code == 200
    again = client.conversations.messages.list(conversation.id, order="asc").items[0]
    assert again.id == first.id and "Name: Ada" in again.content
    # Compact: the summary replaces older messages in this conversation's context only.
    before = len(client.conversations.retrieve(conversation.id).in_context_message_ids)
    llm.push(Reply(content="They asked three questions."))
    compacted = await system.http.post(f"/v1/conversations/{conversation.id}/compact", json={})
    assert compacted.status_code == 200, compacted.text
    result = compacted.json()
    assert result["summary"].endswith("They asked three questions.")
    assert result["num_messages_before"] > result["num_messages_after"]
    after = client.conversations.retrieve(conversation.id).in_context_message_ids
    assert len(after) < before and after[0] == first.id
    # Delete: gone from the API, 404 on a second delete or an update.
    assert (await system.http.delete(f"/v1/conversations/{conversation.id}")).status_code == 200
    assert (await system.http.get(f"/v1/conversations/{conversation.id}")).status_code == 404
    assert (await system.http.delete(f"/v1/conversations/{conversation.id}")).status_code == 404
    patched = await system.http.patch(f"/v1/conversations/{conversation.id}", json={"summary": "x"})
    assert patched.status_code == 404
    assert conversation.id not in [c.id for c in client.conversations.list(agent_id=agent["id"])]


async def test_an_agents_recompile_keeps_its_time_unless_asked(system: System) -> None:
    """`client.agents.recompile` (Letta's recompile_agent): the default conversation's system
    message shows memory as it is now; its "last recompiled" line moves only with
    `update_timestamp`; `dry_run` stores nothing."""
    agent = await new_agent(system)
    client = system.client()
    first = client.agents.messages.list(agent["id"], order="asc").items[0]
    stamp = next(x for x in first.content.splitlines() if "last recompiled" in x)
    client.agents.blocks.update("human", agent_id=agent["id"], value="Name: Grace")
    # The SDK gives the JSON string's text as it came (its cast_to=str), as against Letta.
    dry = json.loads(client.agents.recompile(agent["id"], dry_run=True))
    assert "Name: Grace" in dry and stamp in dry
    unchanged = client.agents.messages.list(agent["id"], order="asc").items[0]
    assert "Name: Grace" not in unchanged.content
    kept = json.loads(client.agents.recompile(agent["id"]))
    stored = client.agents.messages.list(agent["id"], order="asc").items[0]
    assert stored.id == first.id and stored.content == kept
    assert "Name: Grace" in kept and stamp in kept
    # The prompt states its time to the second: let the clock pass the stamp's second.
    compiled = recompiled_at(first.content)
    assert compiled is not None
    await asyncio.sleep((compiled + timedelta(seconds=1) - datetime.now(UTC)).total_seconds())
    moved = await system.http.post(
        f"/v1/agents/{agent['id']}/system-prompt/recompile", params={"update_timestamp": "true"}
    )
    assert moved.status_code == 200 and "Name: Grace" in moved.json()
    assert stamp not in moved.json()
    with pytest.raises(letta_client.NotFoundError):
        client.agents.recompile("agent-00000000-0000-4000-8000-000000000000")


async def test_the_system_message_shows_the_rules_and_folders_the_model_is_sent(
    system: System, llm: FakeOpenAI
) -> None:
    """The stored system message is compiled as the executor compiles each step's prompt:
    the agent's tool rules at creation, its folders once recompiled."""
    agent = await new_agent(
        system, tool_rules=[{"type": "exit_loop", "tool_name": "memory_insert"}]
    )
    client = system.client()
    stored = client.agents.messages.list(agent["id"], order="asc").items[0].content
    llm.push(Reply(content="ok"))
    await send_default(system, agent["id"], "hi")
    sent = prompt_of(llm.requests[-1])
    rules = "<tool_usage_rules>"
    assert stored[stored.index(rules) :] == sent[sent.index(rules) :]
    folder = await new_folder(system)
    attached = await system.http.patch(f"/v1/agents/{agent['id']}/folders/attach/{folder['id']}")
    assert attached.status_code == 200, attached.text
    recompiled = json.loads(client.agents.recompile(agent["id"]))
    assert f'<directory name="{folder["name"]}">' in recompiled
    assert recompiled.index("<directories>") < recompiled.index(rules)
    llm.push(Reply(content="ok"))
    await send_default(system, agent["id"], "again")
    sent = prompt_of(llm.requests[-1])

    def directories(prompt: str) -> str:
        return prompt[prompt.index("<directories>") : prompt.index("</directories>")]

    assert directories(recompiled) == directories(sent)


async def test_bad_requests(system: System) -> None:
    agent = await new_agent(system)
    http = system.http
    empty = await http.post(
        "/v1/conversations/default/messages", json={"agent_id": agent["id"], "messages": []}
    )
    assert empty.status_code == 422 and "must not be empty" in empty.json()["detail"]
    no_agent = await http.post(
        "/v1/conversations/default/messages", json={"messages": [{"content": "hi"}]}
    )
    assert no_agent.status_code == 422 and "agent_id" in no_agent.json()["detail"]
    missing = "conv-00000000-0000-4000-8000-000000000000"
    assert (await http.get(f"/v1/conversations/{missing}")).status_code == 404
    assert (await http.post(f"/v1/conversations/{missing}/fork")).status_code == 404
    bad_model = await http.post(
        "/v1/conversations/", params={"agent_id": agent["id"]}, json={"model": "nomodel"}
    )
    assert bad_model.status_code == 422
    no_stream = await http.post("/v1/conversations/default/stream", json={"agent_id": agent["id"]})
    assert no_stream.status_code == 400 and "No active runs" in no_stream.json()["detail"]


async def test_reset_messages_clears_the_default_context(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    client = system.client()
    llm.push(Reply(content="first answer"))
    client.agents.messages.create(agent["id"], messages=[{"role": "user", "content": "one"}])
    client.agents.blocks.update("human", agent_id=agent["id"], value="Name: Reset")
    response = await system.http.patch(f"/v1/agents/{agent['id']}/reset-messages", json={})
    assert response.status_code == 200, response.text
    (system_id,) = response.json()["message_ids"]
    assert system_id == agent["message_ids"][0]
    # The history keeps everything; the next run's context starts afresh.
    history = client.agents.messages.list(agent["id"]).items
    assert [m.message_type for m in history] == [
        "system_message",
        "user_message",
        "assistant_message",
    ]
    assert "Name: Reset" in history[0].content
    llm.push(Reply(content="fresh"))
    client.agents.messages.create(agent["id"], messages=[{"role": "user", "content": "two"}])
    assert [m["content"] for m in llm.requests[-1]["messages"][1:]] == ["two"]


async def test_compaction_mode_all_leaves_the_system_message_and_the_summary(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    client = system.client()
    for i in range(2):
        llm.push(Reply(content=f"answer {i}"))
        client.agents.messages.create(agent["id"], messages=[{"role": "user", "content": f"q{i}"}])
    llm.push(Reply(content="Two questions, two answers."))
    result = client.agents.messages.compact(agent["id"], compaction_settings={"mode": "all"})
    assert result.summary.endswith("Two questions, two answers.")
    assert (result.num_messages_before, result.num_messages_after) == (5, 2)
    ids = client.agents.retrieve(agent["id"]).message_ids
    assert len(ids) == 2 and ids[0] == agent["message_ids"][0]
    # The next run's context is the summary alone, then the new message.
    llm.push(Reply(content="fine"))
    client.agents.messages.create(agent["id"], messages=[{"role": "user", "content": "next"}])
    sent = llm.requests[-1]["messages"][1:]
    assert len(sent) == 2 and "Two questions" in sent[0]["content"] and sent[1]["content"] == "next"
    bad = await system.http.post(
        f"/v1/agents/{agent['id']}/summarize", json={"compaction_settings": {"mode": "most"}}
    )
    assert bad.status_code == 422


async def test_a_conversation_with_its_own_block(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    client = system.client()
    http = system.http
    created = await http.post(
        "/v1/conversations/",
        params={"agent_id": agent["id"]},
        json={"isolated_block_labels": ["human"]},
    )
    assert created.status_code == 200, created.text
    private = created.json()
    (own,) = private["isolated_block_ids"]
    assert own not in [b["id"] for b in agent["memory"]["blocks"]]
    # Its memory tool edits its own copy; the agent's block and other conversations
    # keep theirs.
    llm.push(
        Reply(tool_calls=[("memory_insert", {"label": "human", "new_string": "Secret: owl"})]),
        Reply(content="kept"),
    )
    send(client, private["id"], "remember owl, just here")
    assert "Secret: owl" in prompt_of(llm.requests[-1])
    assert (await http.get(f"/v1/blocks/{own}")).json()["value"] == "Name: Sam\nSecret: owl"
    human = await http.get(f"/v1/agents/{agent['id']}/core-memory/blocks/human")
    assert human.json()["value"] == "Name: Sam"
    other = client.conversations.create(agent_id=agent["id"])
    llm.push(Reply(content="no owl here"))
    send(client, other.id, "anything secret?")
    assert "Secret: owl" not in prompt_of(llm.requests[-1])
    # Its system message is compiled with its own block; a fork gets a copy of it.
    first = client.conversations.messages.list(private["id"], order="asc").items[0]
    forked = (await http.post(f"/v1/conversations/{private['id']}/fork")).json()
    (copy,) = forked["isolated_block_ids"]
    assert copy != own
    assert (await http.get(f"/v1/blocks/{copy}")).json()["value"] == "Name: Sam\nSecret: owl"
    assert "Name: Sam\n" in first.content
    # Deleting the conversation deletes its own block.
    assert (await http.delete(f"/v1/conversations/{private['id']}")).status_code == 200
    assert (await http.get(f"/v1/blocks/{own}")).status_code == 404
    missing = await http.post(
        "/v1/conversations/",
        params={"agent_id": agent["id"]},
        json={"isolated_block_labels": ["nothing"]},
    )
    assert missing.status_code == 404


async def test_a_conversation_runs_with_its_model_settings(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    client = system.client()
    created = await system.http.post(
        "/v1/conversations/",
        params={"agent_id": agent["id"]},
        json={
            "model_settings": {
                "provider_type": "openai",
                "temperature": 0.3,
                "max_output_tokens": 300,
            }
        },
    )
    assert created.status_code == 200, created.text
    tuned = created.json()
    assert tuned["model_settings"]["temperature"] == 0.3
    llm.push(Reply(content="tuned"), Reply(content="plain"))
    send(client, tuned["id"], "hello")
    request = llm.requests[-1]
    assert (request["temperature"], request["max_completion_tokens"]) == (0.3, 300)
    client.agents.messages.create(agent["id"], messages=[{"role": "user", "content": "hi"}])
    assert llm.requests[-1].get("temperature") != 0.3
    bad = await system.http.post(
        "/v1/conversations/",
        params={"agent_id": agent["id"]},
        json={"model_settings": {"temperature": 9}},
    )
    assert bad.status_code == 422
