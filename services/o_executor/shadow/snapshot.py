"""An agent as the log had it at one position: its configuration, blocks, conversation,
users' tools and archive, folded from its events (no projection is read).

The folds mirror what the projections make of the same events (tests compare
the two: tests/integration/test_shadow.py). A snapshot is what the shadow
runner runs an agent on.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from o_contracts import subjects
from o_contracts.base import Message
from o_contracts.envelope import MalformedMessage, decode
from o_contracts.events import (
    AgentCreated,
    AgentDeleted,
    AgentUpdated,
    ArchiveAttached,
    ArchiveDeleted,
    ArchiveDetached,
    ArchivePassageDeleted,
    ArchivePassagesInserted,
    BlockAttached,
    BlockCreated,
    BlockDeleted,
    BlockDetached,
    BlockUpdated,
    ContextSummarized,
    ConversationCreated,
    LLMResponded,
    MemoriesReflected,
    MessagesImported,
    MessagesReset,
    PassageDeleted,
    PassageInserted,
    RunRolledBack,
    RunStarted,
    RunSteered,
    ToolAttached,
    ToolCreated,
    ToolDeleted,
    ToolDetached,
    ToolReturned,
    ToolUpdated,
)
from o_contracts.models import ChatMessage
from o_contracts.ordering import before, imported_offset, position
from o_executor.run.agent import AgentConfig, UserTool
from o_memory.core_memory import CoreMemory
from o_runtime.eventlog import EventLog

# What the agents projection keeps of an agent (AgentUpdated may change these).
_AGENT_FIELDS = ("name", "system", "agent_type", "llm_config", "tools", "tool_rules", "tool_ids")


@dataclass
class AgentFold:
    fields: dict[str, Any] = field(default_factory=dict)
    # Attached blocks: block id -> position (creation or attach order).
    blocks: dict[str, int] = field(default_factory=dict)
    deleted: bool = False

    def apply(self, seq: int, event: Message) -> None:
        if isinstance(event, AgentCreated):
            self.fields = {
                "id": event.agent_id,
                "name": event.name,
                "system": event.system,
                "agent_type": event.agent_type,
                "llm_config": event.llm_config,
                "tools": list(event.tools),
                "tool_rules": [r.model_dump(mode="json") for r in event.tool_rules],
                "tool_ids": list(event.tool_ids),
                "encrypted_secrets": dict(event.encrypted_secrets),
            }
            self.blocks = {b: position(seq, i) for i, b in enumerate(event.block_ids)}
        elif isinstance(event, AgentUpdated):
            self.fields |= {
                k: v for k, v in event.changes.items() if k in (*_AGENT_FIELDS, "encrypted_secrets")
            }
            if "block_ids" in event.changes:
                self.blocks = {
                    b: position(seq, i) for i, b in enumerate(event.changes["block_ids"])
                }
        elif isinstance(event, BlockAttached):
            self.blocks.setdefault(event.block_id, position(seq))
        elif isinstance(event, BlockDetached):
            self.blocks.pop(event.block_id, None)
        elif isinstance(event, ToolAttached):
            if event.tool_id not in self.fields["tool_ids"]:
                self.fields["tool_ids"] = [*self.fields["tool_ids"], event.tool_id]
                if event.requires_approval and event.tool_name:
                    rule = {"type": "requires_approval", "tool_name": event.tool_name}
                    self.fields["tool_rules"] = [*self.fields["tool_rules"], rule]
        elif isinstance(event, ToolDetached):
            self.fields["tool_ids"] = [t for t in self.fields["tool_ids"] if t != event.tool_id]
        elif isinstance(event, AgentDeleted):
            self.deleted = True

    def block_ids(self) -> list[str]:
        return [b for b, _ in sorted(self.blocks.items(), key=lambda item: (item[1], item[0]))]


@dataclass
class ConversationFold:
    """Every message, with its position and whether it is in context (the runs projection)."""

    messages: dict[str, tuple[int, ChatMessage, str | None]] = field(default_factory=dict)
    in_context: dict[str, bool] = field(default_factory=dict)
    # A named conversation's own blocks (ConversationCreated.isolated_block_ids).
    isolated_block_ids: list[str] = field(default_factory=list)

    def inherit(self, source: ConversationFold) -> None:
        """A fork starts with what was in its source's context, at the same positions."""
        for message_id, (at, message, run_id) in source.messages.items():
            if source.in_context[message_id]:
                self._add(at, message, run_id)

    def _add(
        self, at: int, message: ChatMessage, run_id: str | None, in_context: bool = True
    ) -> None:
        if message.id not in self.messages:
            self.messages[message.id] = (at, message, run_id)
            self.in_context[message.id] = in_context

    def apply(self, seq: int, event: Message) -> None:
        if isinstance(event, AgentCreated):
            # Letta's initial_message_sequence (after the system message, offset 0,
            # which a run never reads: it compiles its own prompt).
            for i, m in enumerate(event.initial_messages, start=1):
                self._add(position(seq, i), m, None)
        elif isinstance(event, MessagesImported):
            for i, item in enumerate(event.messages):
                self._add(position(seq, imported_offset(i)), item.message, None, item.in_context)
        elif isinstance(event, MessagesReset):
            for message_id in self.in_context:
                self.in_context[message_id] = False
        elif isinstance(event, RunStarted):
            for i, m in enumerate(event.messages):
                self._add(position(seq, i), m, event.run_id)
        elif isinstance(event, LLMResponded | ToolReturned):
            self._add(position(seq), event.message, event.run_id)
        elif isinstance(event, RunSteered):
            for i, m in enumerate(event.messages):
                self._add(position(seq, i), m, event.run_id)
        elif isinstance(event, RunRolledBack):
            for message_id, (_, _, run_id) in self.messages.items():
                if run_id == event.run_id:
                    self.in_context[message_id] = False
        elif isinstance(event, ContextSummarized):
            everything = event.first_kept_message_id is None
            kept = None if everything else self.messages.get(event.first_kept_message_id or "")
            kept_at = kept[0] if kept is not None else position(seq)
            if event.evicted_message_ids:
                for message_id in event.evicted_message_ids:
                    if message_id in self.in_context:
                        self.in_context[message_id] = False
            else:
                for message_id, (at, _, _) in self.messages.items():
                    if at < kept_at:
                        self.in_context[message_id] = False
            self._add(position(seq) if everything else before(kept_at), event.summary, event.run_id)

    def history(self, exclude_run: str | None = None) -> list[ChatMessage]:
        """The in-context messages in order (without run `exclude_run`'s)."""
        rows = [
            (at, message)
            for message_id, (at, message, run_id) in self.messages.items()
            if self.in_context[message_id] and (exclude_run is None or run_id != exclude_run)
        ]
        return [m for _, m in sorted(rows, key=lambda row: row[0])]


@dataclass
class BlockFold:
    state: dict[str, Any] | None = None

    def apply(self, seq: int, event: Message) -> None:
        if isinstance(event, BlockCreated):
            spec = event.spec
            self.state = {
                "id": event.block_id,
                "label": spec.label,
                "value": spec.value,
                "limit": spec.limit,
                "description": spec.description,
                "read_only": spec.read_only,
                "metadata": dict(spec.metadata),
                "tags": list(spec.tags),
                "version": 1,
                "last_seq": seq,
            }
        elif isinstance(event, BlockUpdated) and self.state is not None:
            for name in ("label", "value", "limit", "description", "read_only", "metadata", "tags"):
                if name in event.changes:
                    self.state[name] = event.changes[name]
            if event.value_edit is not None:
                self.state["value"] = event.value_edit.applied_to(self.state["value"])
            self.state["version"] = event.version
            self.state["last_seq"] = seq
        elif isinstance(event, BlockDeleted):
            self.state = None


@dataclass
class ToolFold:
    state: dict[str, Any] | None = None

    def apply(self, seq: int, event: Message) -> None:
        if isinstance(event, ToolCreated):
            self.state = {
                "id": event.tool_id,
                "name": event.name,
                "source_code": event.source_code,
                "json_schema": event.json_schema,
                "return_char_limit": event.return_char_limit,
                "idempotent": event.idempotent,
                "pip_requirements": [r.model_dump() for r in event.pip_requirements],
            }
        elif isinstance(event, ToolUpdated) and self.state is not None:
            self.state |= {k: v for k, v in event.changes.items() if k in self.state}
        elif isinstance(event, ToolDeleted):
            self.state = None


@dataclass
class ArchiveFold:
    # Passage id -> its tags (what a prompt shows of the archive: how many, which tags).
    passages: dict[str, list[str]] = field(default_factory=dict)

    def apply(self, seq: int, event: Message) -> None:
        if isinstance(event, PassageInserted):
            self.passages.setdefault(event.passage.passage_id, list(event.passage.tags))
        elif isinstance(event, ArchivePassagesInserted):
            for p in event.passages:
                self.passages.setdefault(p.passage_id, list(p.tags))
        elif isinstance(event, MemoriesReflected):
            for insight in event.insights:
                self.passages.setdefault(insight.passage_id, list(insight.tags))
        elif isinstance(event, PassageDeleted | ArchivePassageDeleted):
            self.passages.pop(event.passage_id, None)
        elif isinstance(event, ArchiveDeleted):
            self.passages.clear()


async def _archival_memory(log: LogReader, agent_id: str, seq: int) -> ArchiveFold:
    """The agent's archival memory as of `seq`: its own passages and those of the archives
    attached to it then (events/archives.py)."""
    fold = ArchiveFold()
    for at, event in await log.events(subjects.archival_subject(agent_id), seq):
        fold.apply(at, event)
    attached: dict[str, None] = {}
    for _, event in await log.events(subjects.agent_archives_filter(agent_id), seq):
        if isinstance(event, ArchiveAttached):
            attached[event.archive_id] = None
        elif isinstance(event, ArchiveDetached):
            attached.pop(event.archive_id, None)
    for archive_id in attached:
        shared = ArchiveFold()
        for at, event in await log.events(subjects.archive_subject(archive_id), seq):
            shared.apply(at, event)
        fold.passages.update(shared.passages)
    return fold


@dataclass(frozen=True)
class Snapshot:
    """An agent as of log position `seq`."""

    seq: int
    agent: AgentConfig
    blocks: list[dict[str, Any]]
    conversation: ConversationFold
    archive: ArchiveFold

    def history(self, exclude_run: str | None = None) -> list[ChatMessage]:
        return self.conversation.history(exclude_run)

    def core_memory(self) -> CoreMemory:
        tags = sorted({t for tags in self.archive.passages.values() for t in tags})
        return {
            "blocks": [dict(b) for b in self.blocks],
            "archival_count": len(self.archive.passages),
            "archival_tags": tags,
        }


class AgentNotFound(LookupError):
    pass


class LogReader:
    """A subject's events up to a log position, read straight from the log."""

    def __init__(self, eventlog: EventLog) -> None:
        self.eventlog = eventlog

    async def events(self, subject: str, seq: int) -> list[tuple[int, Message]]:
        return await _events(self.eventlog, subject, seq)


class CachedLogReader(LogReader):
    """Each subject read once, up to `upto`, for many snapshots at positions up to there
    (one evaluation's cases: without it, every case replays the agent's subjects from
    their start, and the shadow's load on NATS grows with the square of the cases)."""

    def __init__(self, eventlog: EventLog, upto: int) -> None:
        super().__init__(eventlog)
        self.upto = upto
        self._read: dict[str, list[tuple[int, Message]]] = {}

    async def events(self, subject: str, seq: int) -> list[tuple[int, Message]]:
        if seq > self.upto:
            return await super().events(subject, seq)
        if subject not in self._read:
            self._read[subject] = await _events(self.eventlog, subject, self.upto)
        return [(at, event) for at, event in self._read[subject] if at <= seq]


async def _events(eventlog: EventLog, subject: str, seq: int) -> list[tuple[int, Message]]:
    """The subject's events up to log position `seq`, decoded (undecodable ones skipped,
    as the projections dead-letter and skip them)."""
    found = []
    async for raw in eventlog.replay(subject):
        if raw.seq > seq:
            break
        try:
            found.append((raw.seq, decode(raw.data).data))
        except MalformedMessage:
            continue
    return found


async def _conversation(
    log: LogReader, agent_id: str, conversation_id: str | None, seq: int
) -> ConversationFold:
    """One conversation's messages as of `seq`: its subject's events, after what a fork
    inherited from its source (folded as of the fork)."""
    fold = ConversationFold()
    lane = subjects.Lane(agent_id, conversation_id)
    for at, event in await log.events(lane.events, seq):
        if isinstance(event, ConversationCreated):
            fold.isolated_block_ids = list(event.isolated_block_ids)
            if event.forked_from is not None:
                fold.inherit(await _conversation(log, agent_id, event.forked_from or None, at))
        fold.apply(at, event)
    return fold


async def _block(log: LogReader, block_id: str, seq: int) -> dict[str, Any] | None:
    fold = BlockFold()
    for at, event in await log.events(subjects.block_subject(block_id), seq):
        fold.apply(at, event)
    return fold.state


async def take_snapshot(
    eventlog: EventLog,
    agent_id: str,
    seq: int,
    conversation_id: str | None = None,
    log: LogReader | None = None,
) -> Snapshot:
    """The agent as the log had it at position `seq` (its own and its blocks', tools' and
    archive's subjects, read up to there), in one of its conversations (None: its default
    one; a named one's own blocks in place of the agent's). `log`: where the subjects are
    read (a CachedLogReader shared by many snapshots)."""
    log = log or LogReader(eventlog)
    agent = AgentFold()
    conversation = ConversationFold()
    for at, event in await log.events(subjects.agent_subject(agent_id), seq):
        agent.apply(at, event)
        if conversation_id is None:
            conversation.apply(at, event)
    if not agent.fields or agent.deleted:
        raise AgentNotFound(f"agent {agent_id} did not exist at log position {seq}")
    if conversation_id is not None:
        conversation = await _conversation(log, agent_id, conversation_id, seq)
    own = {}
    for block_id in conversation.isolated_block_ids:
        state = await _block(log, block_id, seq)
        if state is not None:
            own[state["label"]] = state
    blocks = []
    for block_id in agent.block_ids():
        state = await _block(log, block_id, seq)
        if state is not None:
            blocks.append(own.get(state["label"], state))
    tools: dict[str, UserTool] = {}
    for tool_id in agent.fields["tool_ids"]:
        tool = ToolFold()
        for at, event in await log.events(subjects.tool_subject(tool_id), seq):
            tool.apply(at, event)
        if tool.state is not None:
            tools[tool.state["name"]] = UserTool.from_row(tool.state)
    archive = await _archival_memory(log, agent_id, seq)
    config = dataclasses.replace(AgentConfig.from_row(agent.fields), user_tools=tools)
    return Snapshot(seq, config, blocks, conversation, archive)
