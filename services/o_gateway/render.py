"""Read-model rows to Letta v1 response shapes (AgentState, Block, LettaMessage...)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from o_contracts.agent_types import speaks_plainly
from o_contracts.ids import derived_id
from o_contracts.models import ApprovalDecision, ChatMessage, ContentPart, TextPart, Usage
from o_gateway.model_settings import model_settings
from o_gateway.otids import otid_of

VERSION = "0.16.8"
# Letta's single-tenant server answers in its default organisation.
ORGANIZATION_ID = "org-00000000-0000-4000-8000-000000000000"


def iso(dt: datetime | None) -> str | None:
    return dt.isoformat() if dt else None


def block(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "label": row["label"],
        "value": row["value"],
        "limit": row["limit"],
        "description": row["description"],
        "read_only": row["read_only"],
        "metadata": row["metadata"] or {},
        "tags": row["tags"] or [],
        "is_template": False,
        "template_name": None,
        "template_id": None,
        "base_template_id": None,
        "deployment_id": None,
        "entity_id": None,
        "preserve_on_migration": False,
        "project_id": None,
        "hidden": None,
        "created_by_id": None,
        "last_updated_by_id": None,
        "version": row["version"],
    }


def tool(name: str) -> dict[str, Any]:
    from o_gateway.tools_catalog import tool_state

    return tool_state(name)


def secrets(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The agent's tool secrets as Letta lists them: keys shown, values never."""
    from o_runtime.tool_secrets import REDACTED

    return [
        {"agent_id": row["id"], "key": key, "value": REDACTED, "description": None}
        for key in sorted(row.get("encrypted_secrets") or {})
    ]


def agent(
    row: dict[str, Any],
    blocks: list[dict[str, Any]],
    user_tools: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    from o_gateway.tool_registry import render_user_tool

    rendered_blocks = [block(b) for b in blocks]
    llm = row["llm_config"]
    emb = row["embedding_config"]
    return {
        "id": row["id"],
        "name": row["name"],
        "system": row["system"],
        "agent_type": row["agent_type"],
        "llm_config": llm,
        "embedding_config": emb,
        "model": llm.get("handle"),
        "model_settings": model_settings(llm),
        "embedding": emb.get("handle") if emb else None,
        "memory": {
            "agent_type": row["agent_type"],
            "git_enabled": False,
            "blocks": rendered_blocks,
            "file_blocks": [],
            "prompt_template": "",
        },
        "blocks": rendered_blocks,
        "tools": [tool(n) for n in row["tools"]] + [render_user_tool(t) for t in user_tools or []],
        "sources": [],
        "tags": row["tags"] or [],
        "tool_rules": row["tool_rules"] or [],
        "message_ids": None,
        "metadata": row["metadata"] or {},
        "description": row["description"],
        "timezone": row["timezone"] or "UTC",
        "tool_exec_environment_variables": secrets(row),
        "secrets": secrets(row),
        "identity_ids": [],
        "identities": [],
        "pending_approval": None,
        "message_buffer_autoclear": False,
        "enable_sleeptime": None,
        "multi_agent_group": None,
        "managed_group": None,
        # (last_stop_reason, last_run_completion, last_run_duration_ms: routes/agents.last_run)
        "project_id": None,
        "template_id": None,
        "base_template_id": None,
        "deployment_id": None,
        "entity_id": None,
        "hidden": None,
        "response_format": None,
        "created_by_id": None,
        "last_updated_by_id": None,
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
    }


def _common(
    m: ChatMessage, date: datetime, run_id: str | None, step_id: str | None
) -> dict[str, Any]:
    return {
        "id": m.id,
        "date": date.isoformat(timespec="seconds"),
        "name": m.name,
        "otid": m.otid,
        "sender_id": None,
        "step_id": step_id,
        "is_err": None,
        "seq_id": None,
        "run_id": run_id,
    }


@dataclass(frozen=True)
class AssistantView:
    """How a memgpt agent's reply tool shows: as an assistant_message (Letta's default), or,
    with use_assistant_message false, as the tool call and tool return it is."""

    use_assistant_message: bool = True
    tool_name: str = "send_message"
    tool_kwarg: str = "message"

    @classmethod
    def of(cls, config: Mapping[str, Any] | None) -> AssistantView:
        """The view a request (or a run's recorded request_config) asks for."""
        config = config or {}
        return cls(
            use_assistant_message=config.get("use_assistant_message", True) is not False,
            tool_name=config.get("assistant_message_tool_name") or "send_message",
            tool_kwarg=config.get("assistant_message_tool_kwarg") or "message",
        )


DEFAULT_VIEW = AssistantView()


def _output(lines: list[str] | None) -> list[str] | None:
    """A tool's stdout or stderr as Letta shows it: the whole text as one item (the
    log keeps its lines)."""
    return ["\n".join(lines)] if lines else lines


def approval_response(answers: list[ApprovalDecision]) -> dict[str, Any]:
    """Letta's approval_response_message: each answer (an approval, or a client tool's
    result), and the first one's in the older single-answer fields."""
    shown: list[dict[str, Any]] = []
    for a in answers:
        if a.tool_return is not None:
            shown.append(
                {
                    "type": "tool",
                    "tool_call_id": a.tool_call_id,
                    "tool_return": a.tool_return,
                    "status": a.status,
                    "stdout": None,
                    "stderr": None,
                }
            )
        else:
            shown.append(
                {
                    "type": "approval",
                    "tool_call_id": a.tool_call_id,
                    "approve": a.approve,
                    "reason": a.reason,
                }
            )
    first = answers[0] if answers else None
    return {
        "message_type": "approval_response_message",
        "approvals": shown,
        "approve": first.approve if first else None,
        "approval_request_id": first.tool_call_id if first else None,
        "reason": first.reason if first else None,
    }


def _tool_call(tc: Any) -> dict[str, str]:
    return {"name": tc.name, "arguments": tc.arguments, "tool_call_id": tc.id}


def content_parts(parts: list[ContentPart], images: Mapping[str, str]) -> list[dict[str, Any]]:
    """Content parts as Letta shows them: a stored image as source type `letta` (a file
    id, and its base64 data when `images` has it), a URL image as its URL."""
    out: list[dict[str, Any]] = []
    for p in parts:
        if isinstance(p, TextPart):
            out.append({"type": "text", "text": p.text, "signature": None})
        elif p.sha256 is not None:
            source = {
                "type": "letta",
                "file_id": derived_id("file", p.sha256),
                "media_type": p.media_type,
                "data": images.get(p.sha256),
                "detail": p.detail,
            }
            out.append({"type": "image", "source": source})
        else:
            out.append({"type": "image", "source": {"type": "url", "url": p.url}})
    return out


def letta_messages(
    m: ChatMessage,
    date: datetime,
    run_id: str | None,
    step_id: str | None,
    agent_type: str,
    hidden_tool_calls: set[str] | None = None,
    view: AssistantView = DEFAULT_VIEW,
    images: Mapping[str, str] | None = None,
    conversation_id: str | None = None,
) -> list[dict[str, Any]]:
    """One stored message as Letta's API messages (one message may give several), each with
    its otid (otids.py: the n-th of them gets position n).

    `hidden_tool_calls` collects ids of `send_message` calls, whose tool
    returns Letta leaves out of the listing. `images`: the base64 data of stored
    images by SHA-256 (o_gateway/images.image_data), for messages that show images.
    """
    out = _letta_messages(
        m, date, run_id, step_id, agent_type, hidden_tool_calls, view, images or {}
    )
    for position, message in enumerate(out):
        message["otid"] = otid_of(m, position)
        # The conversation it was said in (None: the agent's default one, as Letta).
        message["conversation_id"] = conversation_id
    return out


def _letta_messages(
    m: ChatMessage,
    date: datetime,
    run_id: str | None,
    step_id: str | None,
    agent_type: str,
    hidden_tool_calls: set[str] | None,
    view: AssistantView,
    images: Mapping[str, str],
) -> list[dict[str, Any]]:
    base = _common(m, date, run_id, step_id)
    if m.approvals is not None:
        return [base | approval_response(m.approvals)]
    if m.role == "user":
        content = content_parts(m.parts, images) if m.parts else m.content or ""
        return [base | {"message_type": "user_message", "content": content}]
    if m.role == "system":
        return [base | {"message_type": "system_message", "content": m.content or ""}]
    if m.role == "tool":
        if hidden_tool_calls and m.tool_call_id in hidden_tool_calls:
            return []
        if (
            view.use_assistant_message
            and m.name == view.tool_name
            and not speaks_plainly(agent_type)
        ):
            # The reply tool's return, also on a page without its call (a client's next
            # page starts after the call).
            return []
        ret = {
            "tool_return": m.content or "",
            "status": m.status or "success",
            "tool_call_id": m.tool_call_id or "",
            "stdout": _output(m.stdout),
            "stderr": _output(m.stderr),
        }
        # A multi-modal result shows its parts in tool_returns (tool_return stays text).
        parts = content_parts(m.parts, images) if m.parts else None
        return [
            base
            | {
                "message_type": "tool_return_message",
                **ret,
                "tool_returns": [
                    {"type": "tool", **ret} | ({"tool_return": parts} if parts else {})
                ],
            }
        ]
    out: list[dict[str, Any]] = []
    if m.reasoning:
        out.append(
            base
            | {
                "message_type": "reasoning_message",
                "reasoning": m.reasoning,
                "source": "reasoner_model",
                "signature": m.reasoning_signature,
            }
        )
    if m.content:
        if speaks_plainly(agent_type):
            out.append(base | {"message_type": "assistant_message", "content": m.content})
        else:
            out.append(
                base
                | {
                    "message_type": "reasoning_message",
                    "reasoning": m.content,
                    "source": "non_reasoner_model",
                    "signature": None,
                }
            )
    pending: list[Any] = []

    def flush() -> None:
        # An approval request shows the calls it holds as tool calls, then those
        # that wait for an answer (Letta's split).
        held = [tc for tc in pending if not m.awaiting(tc)]
        asked = [tc for tc in pending if m.awaiting(tc)]
        for kind, group in (("tool_call_message", held), ("approval_request_message", asked)):
            if group:
                calls = [_tool_call(tc) for tc in group]
                out.append(
                    base | {"message_type": kind, "tool_call": calls[0], "tool_calls": calls}
                )
        pending.clear()

    for tc in m.tool_calls:
        if (
            view.use_assistant_message
            and tc.name == view.tool_name
            and not speaks_plainly(agent_type)
            and not m.approval_request
        ):
            flush()
            try:
                text = json.loads(tc.arguments).get(view.tool_kwarg, "")
            except (ValueError, AttributeError):
                text = tc.arguments
            out.append(base | {"message_type": "assistant_message", "content": text})
            if hidden_tool_calls is not None:
                hidden_tool_calls.add(tc.id)
        else:
            pending.append(tc)
    flush()
    return out


def text_chunk(
    message_id: str, text: str, run_id: str, agent_type: str, otid: str
) -> dict[str, Any]:
    """One streamed piece of an assistant message's text (the same id and otid on every
    piece)."""
    now = datetime.now(UTC)
    base = _common(ChatMessage(id=message_id, role="assistant", otid=otid), now, run_id, None)
    if speaks_plainly(agent_type):
        return base | {"message_type": "assistant_message", "content": text}
    return base | {
        "message_type": "reasoning_message",
        "reasoning": text,
        "source": "non_reasoner_model",
        "signature": None,
    }


def tool_call_chunk(
    message_id: str,
    calls: list[dict[str, Any]],
    run_id: str,
    otid: str,
    kind: str = "tool_call_message",
) -> dict[str, Any]:
    """Streamed pieces of tool calls: each with its call id, the name on a call's first
    piece (else None) and only the new argument text (Letta's tool-call deltas)."""
    now = datetime.now(UTC)
    base = _common(ChatMessage(id=message_id, role="assistant", otid=otid), now, run_id, None)
    deltas = [
        {"name": c.get("name"), "arguments": c.get("arguments") or "", "tool_call_id": c["id"]}
        for c in calls
    ]
    return base | {"message_type": kind, "tool_call": deltas[0], "tool_calls": deltas}


def stop_reason(reason: str) -> dict[str, Any]:
    return {"message_type": "stop_reason", "stop_reason": reason}


def usage(u: Usage | dict[str, Any], step_count: int, run_ids: list[str]) -> dict[str, Any]:
    values = u.model_dump() if isinstance(u, Usage) else u
    return {
        "message_type": "usage_statistics",
        "completion_tokens": values.get("completion_tokens", 0),
        "prompt_tokens": values.get("prompt_tokens", 0),
        "total_tokens": values.get("total_tokens", 0),
        "step_count": step_count,
        "run_ids": run_ids,
        "cached_input_tokens": values.get("cached_input_tokens"),
        "cache_write_tokens": values.get("cache_write_tokens"),
        "reasoning_tokens": None,
        "context_tokens": None,
    }
