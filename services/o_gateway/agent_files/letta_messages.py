"""Letta's stored messages (an agent file's MessageSchema) to O's ChatMessage, and back.

Letta keeps a message as a role and content parts: text, reasoning (with the
provider's signature), images; an assistant's tool calls in OpenAI's shape; a
tool message's results under `tool_returns`; a person's answers to an approval
request as a message of role `approval`. O keeps the same facts in one
ChatMessage each (o_contracts.models), so both directions are plain mappings:

- text parts are the message's content, reasoning parts its reasoning;
- Letta's `tool` (and older `function`) messages are tool returns, one
  ChatMessage per result when one message holds several;
- an `approval` message with tool calls is an assistant's approval request,
  one without is the answers (a user message with `approvals`, as O records them);
- parts O does not keep (redacted or omitted reasoning, tool calls repeated as
  content) are left out, and said so by the caller only when nothing is left.

Images sent as data become stored images: their bytes are returned beside the
messages for the importer to put in the object store first (by their SHA-256,
the name the store gives them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from fastapi import HTTPException

from o_contracts.models import (
    ApprovalDecision,
    ChatMessage,
    ContentPart,
    ImagePart,
    TextPart,
    ToolCall,
)
from o_gateway.agent_files.schema import FileMessage
from o_gateway.image_parts import ImageData, ImagePartBody


class BadMessage(ValueError):
    """A message the file holds that cannot be one of O's; the text says why."""


@dataclass
class Content:
    text: str | None = None
    reasoning: str | None = None
    signature: str | None = None
    parts: list[ContentPart] | None = None
    images: dict[str, bytes] = field(default_factory=dict)


def read_content(raw: str | list[dict[str, Any]] | None) -> Content:
    """A message's content parts as O keeps them (text, reasoning, images)."""
    if raw is None:
        return Content()
    if isinstance(raw, str):
        return Content(text=raw)
    texts: list[str] = []
    reasoning: list[str] = []
    signature: str | None = None
    parts: list[ContentPart] = []
    images: dict[str, bytes] = {}
    for part in raw:
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
            parts.append(TextPart(text=part["text"]))
        elif kind == "reasoning" and isinstance(part.get("reasoning"), str):
            reasoning.append(part["reasoning"])
            if isinstance(part.get("signature"), str):
                signature = part["signature"]
        elif kind == "image":
            image = _image(part)
            if isinstance(image, tuple):
                stored, data = image
                images[stored.sha256 or ""] = data
                image = stored
            parts.append(image)
    return Content(
        text="".join(texts) if texts else None,
        reasoning="\n".join(reasoning) if reasoning else None,
        signature=signature,
        parts=parts if images or any(isinstance(p, ImagePart) for p in parts) else None,
        images=images,
    )


def _image(part: dict[str, Any]) -> ImagePart | tuple[ImagePart, bytes]:
    try:
        checked = ImagePartBody.model_validate(part).checked()
    except HTTPException as exc:
        raise BadMessage(f"an image: {exc.detail}") from exc
    except ValueError as exc:
        raise BadMessage(f"an image: {exc}") from exc
    if isinstance(checked, ImageData):
        stored = ImagePart(
            sha256=hashlib.sha256(checked.data).hexdigest(),
            size=len(checked.data),
            media_type=checked.media_type,
            detail=checked.detail,
        )
        return stored, checked.data
    return checked


def to_chat(m: FileMessage, message_id: Callable[[int], str]) -> tuple[list[ChatMessage], Content]:
    """The ChatMessages of one file message (`message_id(i)`: the id of the i-th), and its
    content as read (its images to store)."""
    content = read_content(m.content)
    if m.role == "system":
        return [ChatMessage(id=message_id(0), role="system", content=content.text or "")], content
    if m.role == "user":
        message = ChatMessage(
            id=message_id(0), role="user", content=content.text or "", parts=content.parts
        )
        return [message], content
    if m.role == "assistant" or (m.role == "approval" and m.tool_calls):
        message = ChatMessage(
            id=message_id(0),
            role="assistant",
            content=content.text,
            reasoning=content.reasoning,
            reasoning_signature=content.signature if content.reasoning else None,
            tool_calls=[
                ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments)
                for c in m.tool_calls or []
            ],
            name=m.name,
            approval_request=True if m.role == "approval" else None,
        )
        return [message], content
    if m.role == "approval":
        return [_answers(m, message_id(0))], content
    return _tool_returns(m, content, message_id), content


def _answers(m: FileMessage, message_id: str) -> ChatMessage:
    decisions = []
    for a in m.approvals or []:
        if a.type == "tool":
            decisions.append(
                ApprovalDecision(
                    tool_call_id=a.tool_call_id,
                    tool_return=a.func_response or "",
                    status=a.status or "success",
                )
            )
        else:
            decisions.append(
                ApprovalDecision(
                    tool_call_id=a.tool_call_id, approve=a.approve is not False, reason=a.reason
                )
            )
    if not decisions:
        raise BadMessage("an approval message with neither tool calls nor approvals")
    return ChatMessage(id=message_id, role="user", approvals=decisions)


def _tool_returns(
    m: FileMessage, content: Content, message_id: Callable[[int], str]
) -> list[ChatMessage]:
    returns = m.tool_returns or []
    if not returns:
        if not m.tool_call_id:
            raise BadMessage("a tool message names no tool call (tool_call_id)")
        return [
            ChatMessage(
                id=message_id(0),
                role="tool",
                content=content.text or "",
                tool_call_id=m.tool_call_id,
                name=m.name,
            )
        ]
    out = []
    for i, r in enumerate(returns):
        call_id = r.tool_call_id or m.tool_call_id
        if not call_id:
            raise BadMessage("a tool return names no tool call (tool_call_id)")
        # One result: its text is the message's when the return does not repeat it.
        text = r.func_response if r.func_response is not None else content.text
        out.append(
            ChatMessage(
                id=message_id(i),
                role="tool",
                content=text or "",
                tool_call_id=call_id,
                name=m.name,
                status=r.status,
                stdout=r.stdout,
                stderr=r.stderr,
            )
        )
    return out


# ---------------------------------------------------------------------------- export


def to_letta(
    m: ChatMessage,
    file_id: str,
    agent_file_id: str,
    created_at: datetime,
    image_data: dict[str, str],
) -> dict[str, Any]:
    """Letta's MessageSchema of one of O's messages (`image_data`: stored images' base64)."""
    role: str = m.role
    content: list[dict[str, Any]] = []
    tool_returns: list[dict[str, Any]] = []
    approvals: list[dict[str, Any]] | None = None
    if m.role == "assistant":
        if m.reasoning:
            content.append(
                {
                    "type": "reasoning",
                    "is_native": m.reasoning_signature is not None,
                    "reasoning": m.reasoning,
                    "signature": m.reasoning_signature,
                }
            )
        if m.content:
            content.append({"type": "text", "text": m.content})
        if m.approval_request:
            role = "approval"
    elif m.approvals:
        role = "approval"
        approvals = [_approval(a) for a in m.approvals]
    elif m.parts:
        content = [_part(p, image_data) for p in m.parts]
    else:
        content.append({"type": "text", "text": m.content or ""})
    if m.role == "tool":
        tool_returns.append(
            {
                "tool_call_id": m.tool_call_id,
                "status": m.status or "success",
                "stdout": m.stdout,
                "stderr": m.stderr,
                "func_response": m.content,
            }
        )
    return {
        "type": "message",
        "role": role,
        "content": content,
        "name": m.name,
        "otid": None,
        "sender_id": None,
        "batch_item_id": None,
        "group_id": None,
        "id": file_id,
        "model": None,
        "agent_id": agent_file_id,
        "tool_calls": [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for c in m.tool_calls
        ]
        or None,
        "tool_call_id": m.tool_call_id,
        "tool_returns": tool_returns,
        "created_at": created_at.isoformat(),
        "approve": None,
        "approval_request_id": None,
        "denial_reason": None,
        "approvals": approvals,
    }


def _approval(a: ApprovalDecision) -> dict[str, Any]:
    if a.tool_return is not None:
        return {
            "type": "tool",
            "tool_call_id": a.tool_call_id,
            "status": a.status,
            "func_response": a.tool_return,
        }
    return {
        "type": "approval",
        "tool_call_id": a.tool_call_id,
        "approve": a.approve,
        "reason": a.reason,
    }


def _part(p: ContentPart, image_data: dict[str, str]) -> dict[str, Any]:
    if isinstance(p, TextPart):
        return {"type": "text", "text": p.text}
    if p.url is not None:
        return {"type": "image", "source": {"type": "url", "url": p.url}}
    return {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": p.media_type or "image/png",
            "data": image_data.get(p.sha256 or "", ""),
            "detail": p.detail,
        },
    }
