"""GET /v1/agents/{agent_id}/context: what the agent's next prompt holds (Letta's
ContextWindowOverview), as the executor compiles it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException

from o_contracts import subjects
from o_contracts.models import ChatMessage
from o_contracts.requests import ContextRead, ReadContext
from o_gateway.executor_requests import ask_executor
from o_gateway.routes.paths import route
from o_gateway.state import GW, checked_id

router = APIRouter()

CONTEXT_TIMEOUT = 30.0


def internal_message(m: ChatMessage, agent_id: str) -> dict[str, Any]:
    """A message in Letta's internal Message shape (role and content parts), as the
    context overview lists them."""
    content: list[dict[str, Any]] = [{"type": "text", "text": m.content}] if m.content else []
    if m.reasoning:
        content.insert(
            0, {"type": "reasoning", "reasoning": m.reasoning, "signature": m.reasoning_signature}
        )
    return {
        "id": m.id,
        "agent_id": agent_id,
        "role": m.role,
        "content": content,
        "name": m.name,
        "otid": m.otid,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in m.tool_calls
        ]
        or None,
        "tool_call_id": m.tool_call_id,
    }


@route(router, "GET", "/v1/agents/{agent_id}/context")
async def context_window(agent_id: str, gw: GW) -> dict[str, Any]:
    checked_id(agent_id, "agent")
    # Read-your-writes: the overview includes every message the log holds so far.
    last = await gw.eventlog.last_seq(subjects.agent_subject(agent_id))
    request = ReadContext(agent_id=agent_id, min_seq=last)
    reply = await ask_executor(
        gw,
        subjects.EXECUTOR_READ_CONTEXT,
        request,
        timeout=CONTEXT_TIMEOUT,
        doing="read the context",
        too_slow="reading the context took too long",
    )
    answer = ContextRead.decode(reply)
    if not answer.ok or answer.overview is None:
        raise HTTPException(answer.status, answer.error)
    overview = answer.overview.model_dump(mode="json", exclude={"messages"})
    overview["messages"] = [internal_message(m, agent_id) for m in answer.overview.messages]
    return overview
