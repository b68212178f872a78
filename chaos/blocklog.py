"""A block's own log, read straight from JetStream, to say *why* a memory edit was lost or
doubled: the API shows one version per number, the log shows every `BlockUpdated` appended.

Read as raw MessagePack envelopes (`type`, `data.version`, and every string the event carries:
`data.changes` with the whole value in BlockUpdated v1, `data.value_edit` with the span in v2),
not through the contracts' models, so a schema change does not stop the diagnosis.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import msgpack
import nats
from nats.js.api import DeliverPolicy

from o_contracts import subjects
from o_runtime.nats_identity import Identity


@dataclass
class BlockEvent:
    seq: int
    type: str
    version: int | None
    time: str
    actor: str | None
    agent_id: str | None
    tool_name: str | None
    text: str  # every string of what the event changed, joined: where tokens are looked for

    def describe(self) -> str:
        who = f"{self.actor or '?'} {self.tool_name or ''}".strip()
        return f"seq {self.seq} {self.type} v{self.version} ({who}, {self.time})"


_IDENTITY = frozenset({"block_id", "version", "actor", "agent_id", "tool_name", "restored_from"})


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


async def read_block_logs(
    nats_url: str, block_ids: list[str], operator: Identity
) -> dict[str, list[BlockEvent]]:
    # As the operator (endpoints.json names its seed: chaos reads the log as people do).
    nc = await nats.connect(
        nats_url, connect_timeout=5, max_reconnect_attempts=3, **operator.options()
    )
    try:
        js = nc.jetstream()
        out: dict[str, list[BlockEvent]] = {}
        for block_id in block_ids:
            sub = await js.subscribe(
                subjects.block_subject(block_id),
                stream=subjects.EVENTS_STREAM,
                ordered_consumer=True,
                deliver_policy=DeliverPolicy.ALL,
            )
            events: list[BlockEvent] = []
            try:
                while True:
                    try:
                        msg = await sub.next_msg(timeout=1.0)
                    except TimeoutError:
                        break
                    events.append(_event(msg.metadata.sequence.stream, msg.data))
            finally:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
            out[block_id] = events
        return out
    finally:
        with contextlib.suppress(Exception):
            await nc.close()


def _event(seq: int, raw: bytes) -> BlockEvent:
    try:
        body = msgpack.unpackb(raw, raw=False)
    except Exception:  # msgpack raises several unrelated types
        return BlockEvent(seq, "<not MessagePack>", None, "", None, None, None, "")
    data = body.get("data") if isinstance(body, dict) else None
    data = data if isinstance(data, dict) else {}
    version = data.get("version")
    return BlockEvent(
        seq=seq,
        type=str(body.get("type")) if isinstance(body, dict) else "?",
        version=version if isinstance(version, int) else None,
        time=str(body.get("time", "")) if isinstance(body, dict) else "",
        actor=data.get("actor"),
        agent_id=data.get("agent_id"),
        tool_name=data.get("tool_name"),
        # `changes` (v1: the whole value) and `value_edit` (v2: the span that changed).
        text="\n".join(_strings({k: v for k, v in data.items() if k not in _IDENTITY})),
    )
