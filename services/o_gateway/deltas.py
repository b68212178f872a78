"""Token deltas of a streamed run, and what a recorded message adds beyond them.

The executor publishes a run's token deltas on core NATS as the LLM streams
them: best effort, so one may be lost, or come after the message it belongs to
is recorded. A stream sends every delta as it comes, then, when the message's
LLMResponded (or ToolReturned) is read from the log, only what the deltas did
not carry: the pieces a client gets add up to the recorded message, none twice.
The same rule serves a message's text and each tool call's arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from o_contracts.agent_types import speaks_plainly
from o_contracts.models import ChatMessage
from o_gateway import render
from o_gateway.otids import derived_otid

# The chunk types that carry an assistant message's text (what text deltas carry).


class DeltaTracker:
    """What deltas sent, per key (a message's id for text, a tool call's id for arguments)."""

    def __init__(self) -> None:
        self._sent: dict[str, str] = {}

    def __bool__(self) -> bool:
        return bool(self._sent)

    def __contains__(self, key: str) -> bool:
        return key in self._sent

    def add(self, key: str, piece: str) -> None:
        self._sent[key] = self._sent.get(key, "") + piece

    def rest(self, key: str, full: str) -> str | None:
        """What `full` adds to what was sent under `key`: None if nothing was sent.

        Sent text that is not a prefix of `full` (not expected) adds nothing more,
        rather than repeating what the client has.
        """
        sent = self._sent.get(key)
        if sent is None:
            return None
        return full[len(sent) :] if full.startswith(sent) else ""


@dataclass(frozen=True)
class ToolCallPiece:
    """Part of a tool call: its name on the first piece only, then argument text."""

    id: str
    name: str | None
    arguments: str


@dataclass(frozen=True)
class TokenDelta:
    """One message on a run's tokens subject (o_executor publishes them as MessagePack)."""

    message_id: str
    text: str = ""
    tool_call: ToolCallPiece | None = None

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> TokenDelta:
        call = data.get("tool_call")
        if call is None:
            return cls(message_id=data["message_id"], text=data["text"])
        piece = ToolCallPiece(id=call["id"], name=call.get("name"), arguments=call["arguments"])
        return cls(message_id=data["message_id"], tool_call=piece)


Chunk = dict[str, Any]  # one Letta streaming chunk, as render.py makes it


@dataclass
class RunDeltas:
    """A streamed run's deltas: what each sends, and what a recorded message still adds."""

    run_id: str
    agent_type: str
    texts: DeltaTracker = field(default_factory=DeltaTracker)  # by message id
    arguments: DeltaTracker = field(default_factory=DeltaTracker)  # by tool call id
    # Messages already recorded: a delta that comes after its message is dropped.
    recorded: set[str] = field(default_factory=set)

    def on_delta(self, delta: TokenDelta) -> Chunk | None:
        """The chunk to send for a delta, None for none."""
        if delta.message_id in self.recorded:
            return None
        call = delta.tool_call
        if call is not None:
            self.arguments.add(call.id, call.arguments)
            piece = {"id": call.id, "name": call.name, "arguments": call.arguments}
            # The tool calls render after the message's text, if it has any (render.py):
            # their position, and so their otid, follows from whether text streamed.
            position = 1 if delta.message_id in self.texts else 0
            otid = derived_otid(delta.message_id, position)
            return render.tool_call_chunk(delta.message_id, [piece], self.run_id, otid)
        if not delta.text:
            return None
        self.texts.add(delta.message_id, delta.text)
        otid = derived_otid(delta.message_id, 0)  # a reply's text renders first
        return render.text_chunk(delta.message_id, delta.text, self.run_id, self.agent_type, otid)

    def on_recorded(self, message: ChatMessage, chunks: list[Chunk]) -> list[Chunk]:
        """Of a recorded message's chunks (render.letta_messages), what to send now.

        Text streamed as deltas is completed by what it missed, tool calls by
        their missed calls and argument text; the rest is sent as recorded.
        """
        self.recorded.add(message.id)
        text = self.texts.rest(message.id, message.content or "")
        out: list[Chunk] = []
        for chunk in chunks:
            kind = chunk["message_type"]
            if text is not None and self._from_content(chunk):
                if text:
                    out.append(
                        render.text_chunk(
                            message.id, text, self.run_id, self.agent_type, chunk["otid"]
                        )
                    )
            elif kind == "tool_call_message" and self.arguments:
                missed = self._unsent_calls(chunk["tool_calls"])
                if missed:
                    out.append(
                        render.tool_call_chunk(message.id, missed, self.run_id, chunk["otid"])
                    )
            else:
                out.append(chunk)
        return out

    @staticmethod
    def nothing_new(chunk: Chunk) -> Chunk:
        """A recorded chunk with nothing its deltas did not carry: the same message with
        empty text (or empty argument pieces), so a numbered stream still gives its seq_id
        and a client joining pieces adds nothing."""
        kind = chunk["message_type"]
        if kind == "assistant_message":
            return chunk | {"content": ""}
        if kind == "reasoning_message":
            return chunk | {"reasoning": ""}
        if kind == "tool_call_message":
            pieces = [
                {"name": None, "arguments": "", "tool_call_id": c["tool_call_id"]}
                for c in chunk["tool_calls"]
            ]
            return chunk | {"tool_call": pieces[0], "tool_calls": pieces}
        return chunk

    def _from_content(self, chunk: Chunk) -> bool:
        """Whether the chunk is the one made from the message's text (what text deltas
        carry): letta_v1 agents' assistant_message; other agents' inner thoughts, whose
        reply (a send_message call, also an assistant_message) never streams as text."""
        if speaks_plainly(self.agent_type):
            return bool(chunk["message_type"] == "assistant_message")
        return chunk["message_type"] == "reasoning_message" and (
            chunk.get("source") == "non_reasoner_model"
        )

    def _unsent_calls(self, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """What of recorded tool calls their pieces did not carry (id, name, arguments)."""
        missed = []
        for call in calls:
            call_id = call["tool_call_id"]
            rest = self.arguments.rest(call_id, call["arguments"] or "")
            if rest is None:
                missed.append({"id": call_id, "name": call["name"], "arguments": call["arguments"]})
            elif rest:
                missed.append({"id": call_id, "name": None, "arguments": rest})
        return missed
