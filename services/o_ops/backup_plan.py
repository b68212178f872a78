"""What a backup holds and in which order it is taken; whether a restore may go ahead
(no I/O).

A backup is a folder: one JetStream snapshot per stream (`<stream>.tar.s2`, the server's
own store: jetstream_snapshots.py) and `manifest.json`, written last, naming each file
with its size, SHA-256, and the stream's configuration and state. A folder without the
manifest is an unfinished backup.

Streams are snapshotted one at a time, while the system may be running, so the order
keeps what one stream says about another true in the copy:

1. `O_COMMANDS` (with its consumers' positions) and `O_DEAD_LETTERS` first;
2. then the run queue's KV bucket: its per-agent cursor ("every run up to command N is
   finished") is at least as new as the commands consumer's position, so a command the
   restored consumer delivers again is one the cursor already counts as done (answered
   from its record), never one the cursor waits for while nobody delivers it;
3. then `O_EVENTS`, the log: a command is acknowledged, and a cursor moved, only after its
   events are appended, so the log copied later holds every event they speak of;
4. then the object stores (images, folders' files): an event names an object only once
   the object is stored, so every object the copied log names was stored before.

Anything appended after a stream's snapshot is not in the backup: a restore gives the
system as it was, stream by stream, at those moments.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from o_contracts import subjects

FORMAT = "o-backup/1"
MANIFEST = "manifest.json"


def _rank(stream: str) -> int:
    if stream in (subjects.COMMANDS_STREAM, subjects.DEAD_LETTER_STREAM):
        return 0
    if stream.startswith("KV_"):
        return 1
    if stream == subjects.EVENTS_STREAM:
        return 3
    if stream.startswith("OBJ_"):
        return 4
    return 2


def backup_order(streams: Sequence[str]) -> list[str]:
    return sorted(streams, key=lambda s: (_rank(s), s))


def snapshot_file(stream: str) -> str:
    return f"{stream}.tar.s2"


@dataclass(frozen=True)
class StreamCopy:
    name: str
    file: str
    size: int
    sha256: str
    messages: int
    first_seq: int
    last_seq: int
    # The configuration and state the server gave with the snapshot (sent back to restore).
    meta: dict[str, Any]


@dataclass(frozen=True)
class Manifest:
    made_at: str
    o_version: str
    streams: list[StreamCopy] = field(default_factory=list)
    format: str = FORMAT

    def dumps(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def loads(cls, text: str) -> Manifest:
        body = json.loads(text)
        if not isinstance(body, dict) or body.get("format") != FORMAT:
            raise CannotRestore(f"not an O backup manifest ({FORMAT})")
        return cls(
            made_at=str(body["made_at"]),
            o_version=str(body["o_version"]),
            streams=[StreamCopy(**s) for s in body["streams"]],
        )


class CannotRestore(Exception):
    pass


def restore_plan(manifest: Manifest, existing: Mapping[str, int]) -> list[tuple[str, bool]]:
    """(stream, whether the empty stream there now is deleted first) for each stream of the
    backup; CannotRestore if any of them holds messages on the server already.

    A restore goes into an empty NATS: streams the setup role made empty are replaced;
    one holding anything is never overwritten.
    """
    holding = [s.name for s in manifest.streams if existing.get(s.name, 0) > 0]
    if holding:
        raise CannotRestore(
            f"the server holds messages in {', '.join(holding)}: restore into an empty NATS"
            " (nothing of it is changed)"
        )
    return [(s.name, s.name in existing) for s in manifest.streams]
