"""An agent as the log had it at one position: its configuration, blocks, conversation,
users' tools and archive, folded from its events (no projection is read).

The folds mirror what the projections make of the same events (tests compare
the two: tests/integration/test_shadow.py). A snapshot is what the shadow
runner runs an agent on.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Protocol

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
    facts,
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

    def copy(self) -> AgentFold:
        # (Its values are replaced, never changed in place: the dicts' copies are enough.)
        return AgentFold(dict(self.fields), dict(self.blocks), self.deleted)

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
    """The messages in context, with their positions (what the runs projection shows a run).

    A message that leaves the context (rolled back, summarized away, reset) never comes
    back, so only its id and position are kept: what the fold holds grows with the
    context, not with the conversation's history.
    """

    # In context: message id -> (position, message, the run that wrote it).
    messages: dict[str, tuple[int, ChatMessage, str | None]] = field(default_factory=dict)
    # Every message folded, in context or not -> its position (a message is added once;
    # a summary keeps the messages from a given one on).
    seen: dict[str, int] = field(default_factory=dict)
    # A named conversation's own blocks (ConversationCreated.isolated_block_ids).
    isolated_block_ids: list[str] = field(default_factory=list)

    def inherit(self, source: ConversationFold) -> None:
        """A fork starts with what was in its source's context, at the same positions."""
        for at, message, run_id in source.messages.values():
            self._add(at, message, run_id)

    def copy(self) -> ConversationFold:
        return ConversationFold(dict(self.messages), dict(self.seen), list(self.isolated_block_ids))

    def _add(
        self, at: int, message: ChatMessage, run_id: str | None, in_context: bool = True
    ) -> None:
        if message.id not in self.seen:
            self.seen[message.id] = at
            if in_context:
                self.messages[message.id] = (at, message, run_id)

    def _evict(self, message_ids: list[str]) -> None:
        for message_id in message_ids:
            self.messages.pop(message_id, None)

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
            self.messages.clear()
        elif isinstance(event, RunStarted):
            for i, m in enumerate(event.messages):
                self._add(position(seq, i), m, event.run_id)
        elif isinstance(event, LLMResponded | ToolReturned):
            self._add(position(seq), event.message, event.run_id)
        elif isinstance(event, RunSteered):
            for i, m in enumerate(event.messages):
                self._add(position(seq, i), m, event.run_id)
        elif isinstance(event, RunRolledBack):
            self._evict([i for i, (_, _, run) in self.messages.items() if run == event.run_id])
        elif isinstance(event, ContextSummarized):
            everything = event.first_kept_message_id is None
            kept_at = self.seen.get(event.first_kept_message_id or "") if not everything else None
            if kept_at is None:
                kept_at = position(seq)
            if event.evicted_message_ids:
                self._evict(event.evicted_message_ids)
            else:
                self._evict([i for i, (at, _, _) in self.messages.items() if at < kept_at])
            self._add(position(seq) if everything else before(kept_at), event.summary, event.run_id)

    def history(self, exclude_run: str | None = None) -> list[ChatMessage]:
        """The in-context messages in order (without run `exclude_run`'s)."""
        rows = [
            (at, message)
            for at, message, run_id in self.messages.values()
            if exclude_run is None or run_id != exclude_run
        ]
        return [m for _, m in sorted(rows, key=lambda row: row[0])]


@dataclass
class BlockFold:
    state: dict[str, Any] | None = None

    def copy(self) -> BlockFold:
        return BlockFold(dict(self.state) if self.state is not None else None)

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

    def copy(self) -> ToolFold:
        return ToolFold(dict(self.state) if self.state is not None else None)

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

    def copy(self) -> ArchiveFold:
        return ArchiveFold(dict(self.passages))

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


@dataclass
class AttachedArchives:
    """Which shared archives are attached to the agent (its archives' attach subjects)."""

    ids: dict[str, None] = field(default_factory=dict)

    def copy(self) -> AttachedArchives:
        return AttachedArchives(dict(self.ids))

    def apply(self, seq: int, event: Message) -> None:
        if isinstance(event, ArchiveAttached):
            self.ids[event.archive_id] = None
        elif isinstance(event, ArchiveDetached):
            self.ids.pop(event.archive_id, None)


@dataclass(frozen=True)
class ArchiveSummary:
    """What a prompt shows of the agent's archival memory: how many passages, which tags."""

    count: int = 0
    tags: tuple[str, ...] = ()

    @classmethod
    def of(cls, folds: list[ArchiveFold]) -> ArchiveSummary:
        passages: dict[str, list[str]] = {}
        for fold in folds:
            passages.update(fold.passages)
        return cls(len(passages), tuple(sorted({t for tags in passages.values() for t in tags})))


@dataclass(frozen=True)
class Snapshot:
    """An agent as of log position `seq`."""

    seq: int
    agent: AgentConfig
    blocks: list[dict[str, Any]]
    conversation: ConversationFold
    archive: ArchiveSummary

    def history(self, exclude_run: str | None = None) -> list[ChatMessage]:
        return self.conversation.history(exclude_run)

    def core_memory(self) -> CoreMemory:
        return {
            "blocks": [dict(b) for b in self.blocks],
            "archival_count": self.archive.count,
            "archival_tags": list(self.archive.tags),
        }


class AgentNotFound(LookupError):
    pass


class Fold(Protocol):
    def apply(self, seq: int, event: Message) -> None: ...

    def copy(self) -> Fold: ...


@dataclass
class Folding:
    """A subject's folds, with every event up to `upto` applied."""

    folds: tuple[Fold, ...]
    upto: int = 0

    def copy(self) -> Folding:
        return Folding(tuple(fold.copy() for fold in self.folds), self.upto)


@dataclass(frozen=True)
class Checkpoint:
    """Folds as a Snapshots had them once it had taken a snapshot at `seq` (each subject's
    with its events up to there, or fewer), to start another from: one whose positions are
    all at `seq` or later reads each subject on from there."""

    seq: int
    folds: dict[str, Folding]


class Snapshots:
    """Snapshots of agents at log positions, each subject's folds carried forward from one
    snapshot to the next.

    Taken in the order of their positions (`many`), the snapshots of one evaluation's
    cases read and fold each subject once, up to the newest case: a case costs the events
    since the one before, not the agent's whole history, and what is held is the agent's
    state (its context, blocks, tools, archive's ids), not its events. A position before
    one already folded starts that subject's folds again from its beginning.
    """

    def __init__(self, eventlog: EventLog, start: Checkpoint | None = None) -> None:
        self.eventlog = eventlog
        self._folds: dict[str, Folding] = (
            {subject: f.copy() for subject, f in start.folds.items()} if start else {}
        )
        # One snapshot at a time: two reading on from the same fold would apply its new
        # events twice.
        self._taking = asyncio.Lock()

    async def many(self, agent_id: str, wanted: list[tuple[int, str | None]]) -> list[Snapshot]:
        """The snapshots at (position, conversation) `wanted`, in that order; taken in the
        order of their positions."""
        taken: dict[int, Snapshot] = {}
        for i in sorted(range(len(wanted)), key=lambda i: wanted[i][0]):
            seq, conversation_id = wanted[i]
            taken[i] = await self.at(agent_id, seq, conversation_id)
        return [taken[i] for i in range(len(wanted))]

    async def checkpoint(self, seq: int) -> Checkpoint:
        """The folds as they are now, those folded no further than `seq` (between two
        snapshots: a fold is copied with all of its events applied, or none)."""
        async with self._taking:
            folds = {s: f.copy() for s, f in self._folds.items() if f.upto <= seq}
        return Checkpoint(seq, folds)

    async def at(self, agent_id: str, seq: int, conversation_id: str | None = None) -> Snapshot:
        """The agent as the log had it at position `seq`, in one of its conversations (None:
        its default one; a named one's own blocks in place of the agent's)."""
        async with self._taking:
            return await self._at(agent_id, seq, conversation_id)

    async def _at(self, agent_id: str, seq: int, conversation_id: str | None) -> Snapshot:
        agent, default = await self._folded(
            subjects.agent_subject(agent_id), seq, lambda: (AgentFold(), ConversationFold())
        )
        assert isinstance(agent, AgentFold) and isinstance(default, ConversationFold)
        if not agent.fields or agent.deleted:
            raise AgentNotFound(f"agent {agent_id} did not exist at log position {seq}")
        conversation = default
        if conversation_id is not None:
            conversation = await self._conversation(agent_id, conversation_id, seq)
        own = {}
        for block_id in conversation.isolated_block_ids:
            state = await self._block(block_id, seq)
            if state is not None:
                own[state["label"]] = state
        blocks = []
        for block_id in agent.block_ids():
            state = await self._block(block_id, seq)
            if state is not None:
                blocks.append(own.get(state["label"], state))
        tools: dict[str, UserTool] = {}
        for tool_id in agent.fields["tool_ids"]:
            (tool,) = await self._folded(subjects.tool_subject(tool_id), seq, lambda: (ToolFold(),))
            assert isinstance(tool, ToolFold)
            if tool.state is not None:
                tools[tool.state["name"]] = UserTool.from_row(tool.state)
        archive = await self._archival_memory(agent_id, seq)
        config = dataclasses.replace(AgentConfig.from_row(agent.fields), user_tools=tools)
        return Snapshot(seq, config, blocks, conversation.copy(), archive)

    async def _block(self, block_id: str, seq: int) -> dict[str, Any] | None:
        (block,) = await self._folded(subjects.block_subject(block_id), seq, lambda: (BlockFold(),))
        assert isinstance(block, BlockFold)
        # A copy: the fold goes on changing its state for later snapshots.
        return dict(block.state) if block.state is not None else None

    async def _conversation(
        self, agent_id: str, conversation_id: str, seq: int
    ) -> ConversationFold:
        """A named conversation's messages as of `seq`: after what a fork inherited from its
        source (folded as of the fork, apart: an earlier position than this one's)."""
        lane = subjects.Lane(agent_id, conversation_id)

        async def created(at: int, event: Message, fold: Fold) -> None:
            if isinstance(event, ConversationCreated) and isinstance(fold, ConversationFold):
                fold.isolated_block_ids = list(event.isolated_block_ids)
                if event.forked_from is not None:
                    source = Snapshots(self.eventlog)
                    if event.forked_from:
                        fold.inherit(await source._conversation(agent_id, event.forked_from, at))
                    else:
                        (_, default) = await source._folded(
                            subjects.agent_subject(agent_id),
                            at,
                            lambda: (AgentFold(), ConversationFold()),
                        )
                        assert isinstance(default, ConversationFold)
                        fold.inherit(default)

        (fold,) = await self._folded(lane.events, seq, lambda: (ConversationFold(),), created)
        assert isinstance(fold, ConversationFold)
        return fold

    async def _archival_memory(self, agent_id: str, seq: int) -> ArchiveSummary:
        """The agent's archival memory as of `seq`: its own passages and those of the
        archives attached to it then (events/archives.py)."""
        (own,) = await self._folded(
            subjects.archival_subject(agent_id), seq, lambda: (ArchiveFold(),)
        )
        (attached,) = await self._folded(
            subjects.agent_archives_filter(agent_id), seq, lambda: (AttachedArchives(),)
        )
        assert isinstance(own, ArchiveFold) and isinstance(attached, AttachedArchives)
        folds = [own]
        for archive_id in attached.ids:
            (shared,) = await self._folded(
                subjects.archive_subject(archive_id), seq, lambda: (ArchiveFold(),)
            )
            assert isinstance(shared, ArchiveFold)
            folds.append(shared)
        return ArchiveSummary.of(folds)

    async def _folded(
        self,
        subject: str,
        seq: int,
        make: Callable[[], tuple[Fold, ...]],
        before: Callable[[int, Message, Fold], Awaitable[None]] | None = None,
    ) -> tuple[Fold, ...]:
        """The subject's folds (made by `make`) with its events up to `seq` applied (each
        first given to `before`). Undecodable events are skipped, as the projections
        dead-letter and skip them."""
        folding = self._folds.get(subject)
        if folding is None or folding.upto > seq:
            folding = self._folds[subject] = Folding(make())
        if folding.upto >= seq:
            return folding.folds
        # (One direct get says whether anything came since: most subjects, a block or a
        # tool, have not changed from one case to the next.)
        if await self.eventlog.last_seq_matching(subject) > folding.upto:
            async with aclosing(self.eventlog.replay(subject, folding.upto + 1)) as events:
                async for raw in events:
                    if raw.seq > seq:
                        break
                    try:
                        event = decode(raw.data).data
                    except MalformedMessage:
                        continue
                    for fold in folding.folds:
                        if before is not None:
                            await before(raw.seq, event, fold)
                        for fact in facts(event):  # (a run's end with its last answer)
                            fold.apply(raw.seq, fact)
        folding.upto = seq
        return folding.folds


class KeptSnapshots:
    """Each agent's Snapshots kept for the next ones asked of it (a canary's analyses, whose
    samples come later each time), the least recently used agent's dropped past `size`."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._kept: OrderedDict[str, Snapshots] = OrderedDict()

    def of(self, eventlog: EventLog, agent_id: str, start: Checkpoint | None = None) -> Snapshots:
        """The agent's Snapshots: those kept, or new ones (from `start`, if given)."""
        snapshots = self._kept.pop(agent_id, None) or Snapshots(eventlog, start)
        self._kept[agent_id] = snapshots
        while len(self._kept) > self.size:
            self._kept.popitem(last=False)
        return snapshots


async def take_snapshot(
    eventlog: EventLog, agent_id: str, seq: int, conversation_id: str | None = None
) -> Snapshot:
    """The agent as the log had it at position `seq` (its own and its blocks', tools' and
    archive's subjects, read up to there), in one of its conversations (None: its default
    one; a named one's own blocks in place of the agent's). Many snapshots of one agent:
    `Snapshots.many`."""
    return await Snapshots(eventlog).at(agent_id, seq, conversation_id)
