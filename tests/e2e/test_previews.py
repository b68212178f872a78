"""POST .../messages/preview-raw-payload: the request a run's first model call would send,
built by the executor's loop and not sent; the run that follows sends the same."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.e2e.conftest import System
from tests.e2e.support import new_agent, send
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e

TEA = [{"role": "user", "content": "I like tea"}]
RECOMPILED = "- System prompt last recompiled: "
COUNTED = re.compile(r"- \d+ previous messages between you and the user")


def without_clock(body: dict[str, Any]) -> dict[str, Any]:
    """The request with its system prompt's "last recompiled" and message count lines taken
    out: the metadata of the prompt's compiling, which each executor replica keeps until
    memory changes (o_executor/run/system_prompts.py), and a preview and the run after it
    may be answered by different replicas."""

    def strip(text: Any) -> Any:
        if not isinstance(text, str):
            return text
        kept = (
            line
            for line in text.split("\n")
            if not line.startswith(RECOMPILED) and not COUNTED.match(line)
        )
        return "\n".join(kept)

    out = dict(body)
    if "system" in out:  # Anthropic's
        out["system"] = (
            [b | {"text": strip(b["text"])} for b in out["system"]]
            if isinstance(out["system"], list)
            else strip(out["system"])
        )
    out["messages"] = [m | {"content": strip(m.get("content"))} for m in out["messages"]]
    return out


async def preview(system: System, path: str, body: dict[str, Any]) -> Any:
    return await system.http.post(f"{path}/messages/preview-raw-payload", json=body)


async def recorded(system: System, agent_id: str) -> tuple[int, int]:
    """How many messages and runs the agent has."""
    messages = (await system.http.get(f"/v1/agents/{agent_id}/messages")).json()
    runs = (await system.http.get("/v1/runs/", params={"agent_id": agent_id})).json()
    return len(messages), len(runs)


async def test_the_preview_is_what_the_run_then_sends_and_records_nothing(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(
        system,
        tool_rules=[
            {"type": "max_count_per_step", "tool_name": "memory_insert", "max_count_limit": 1}
        ],
    )
    llm.push(Reply(content="Hello Sam."))
    await send(system, agent["id"], "hello")  # some history before it
    before, asked = await recorded(system, agent["id"]), len(llm.requests)

    shown = await preview(system, f"/v1/agents/{agent['id']}", {"messages": TEA})
    assert shown.status_code == 200, shown.text
    payload = shown.json()
    assert payload["model"] == "gpt-4o-mini"
    system_prompt = payload["messages"][0]
    assert system_prompt["role"] == "system"
    assert "Name: Sam" in system_prompt["content"]
    assert "memory_insert" in system_prompt["content"]  # its tool rule
    assert [m["content"] for m in payload["messages"][1:]] == ["hello", "Hello Sam.", "I like tea"]
    assert "memory_insert" in {t["function"]["name"] for t in payload["tools"]}
    assert "stream" not in payload
    # Nothing asked, nothing recorded.
    assert len(llm.requests) == asked
    assert await recorded(system, agent["id"]) == before

    llm.push(Reply(content="Noted."))
    await send(system, agent["id"], "I like tea")
    assert without_clock(llm.requests[-1]) == without_clock(payload)


async def test_a_streamed_request_and_an_anthropic_model_are_shown_as_sent(
    system: System, llm: FakeOpenAI, claude: FakeAnthropic
) -> None:
    agent = await new_agent(system)
    body = {"messages": TEA, "streaming": True, "stream_tokens": True}
    streamed = (await preview(system, f"/v1/agents/{agent['id']}", body)).json()
    assert (streamed["stream"], streamed["stream_options"]) == (True, {"include_usage": True})

    agent = await new_agent(system, model="anthropic/claude-sonnet-5-5")
    shown = await preview(system, f"/v1/agents/{agent['id']}", {"messages": TEA})
    assert shown.status_code == 200, shown.text
    payload = shown.json()
    assert payload["model"] == "claude-sonnet-5-5"
    assert "Name: Sam" in str(payload["system"])
    assert payload["messages"][-1]["role"] == "user"
    assert payload["max_tokens"] > 0
    claude.push(Reply(content="Noted, tea."))
    await send(system, agent["id"], "I like tea")
    assert without_clock(claude.requests[-1]) == without_clock(payload)


async def test_a_conversation_previews_with_its_own_model_and_history(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    llm.push(Reply(content="In the default conversation."))
    await send(system, agent["id"], "hello")
    created = await system.http.post(
        "/v1/conversations/", params={"agent_id": agent["id"]}, json={"model": "openai/gpt-4.1"}
    )
    assert created.status_code == 200, created.text
    conversation = created.json()["id"]
    shown = await preview(system, f"/v1/conversations/{conversation}", {"messages": TEA})
    assert shown.status_code == 200, shown.text
    payload = shown.json()
    assert payload["model"] == "gpt-4.1"
    # Its own history: nothing of the default conversation's.
    assert [m["content"] for m in payload["messages"][1:]] == ["I like tea"]
    # The agent-direct form (the agent's id as the conversation) is the default one's.
    direct = (await preview(system, f"/v1/conversations/{agent['id']}", {"messages": TEA})).json()
    assert [m["content"] for m in direct["messages"][1:]] == [
        "hello",
        "In the default conversation.",
        "I like tea",
    ]
    empty = await preview(system, f"/v1/conversations/{conversation}", {"messages": []})
    assert empty.status_code == 422
    assert empty.json()["detail"] == "Messages must not be empty"


async def test_what_a_send_would_refuse_the_preview_refuses(
    system: System, llm: FakeOpenAI
) -> None:
    missing = "agent-00000000-0000-4000-8000-000000000000"
    gone = await preview(system, f"/v1/agents/{missing}", {"messages": TEA})
    assert gone.status_code == 404
    agent = await new_agent(
        system, tool_rules=[{"type": "requires_approval", "tool_name": "memory_insert"}]
    )
    path = f"/v1/agents/{agent['id']}"
    unknown = await preview(system, path, {"messages": TEA, "override_model": "nowhere/model"})
    assert unknown.status_code == 404, unknown.text  # (as a send with it is refused)
    assert unknown.json()["detail"] == "Handle nowhere/model not found or not accessible"
    llm.push(Reply(tool_calls=[("memory_insert", {"label": "human", "new_string": "Tea"})]))
    waiting = await send(system, agent["id"], "I like tea")
    call_id = waiting["messages"][0]["tool_call"]["tool_call_id"]
    before = await recorded(system, agent["id"])
    busy = await preview(system, path, {"messages": TEA})
    assert busy.status_code == 409
    assert busy.json()["detail"]["code"] == "PENDING_APPROVAL"
    approval = {"type": "approval", "approvals": [{"tool_call_id": call_id, "approve": True}]}
    answering = await preview(system, path, {"messages": [approval]})
    assert answering.status_code == 422
    assert "new messages only" in answering.json()["detail"]
    assert await recorded(system, agent["id"]) == before
