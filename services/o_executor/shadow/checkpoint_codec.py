"""A Checkpoint (snapshot.py) as bytes and back, to keep it beyond the process that made it:
an agent's next evaluation after a restart reads on from its last one's first case instead
of folding the agent's whole history again (o_evolution/checkpoints.py).

MessagePack of each fold's fields (pydantic dumps and validates them: a ChatMessage comes
back a ChatMessage), each fold named by its kind. FORMAT names this layout: bytes of
another (an older or a newer O) are not read, and the agent is folded from its start.
"""

from __future__ import annotations

from typing import Any

import msgpack
from pydantic import TypeAdapter, ValidationError

from o_executor.shadow.snapshot import (
    AgentFold,
    ArchiveFold,
    AttachedArchives,
    BlockFold,
    Checkpoint,
    ConversationFold,
    Fold,
    Folding,
    ToolFold,
)

FORMAT = 1

_KINDS: dict[str, type[Any]] = {
    "agent": AgentFold,
    "conversation": ConversationFold,
    "block": BlockFold,
    "tool": ToolFold,
    "archive": ArchiveFold,
    "attached": AttachedArchives,
}
_NAMES = {kind: name for name, kind in _KINDS.items()}
_ADAPTERS = {name: TypeAdapter(kind) for name, kind in _KINDS.items()}


class Unreadable(ValueError):
    """Bytes that are not a checkpoint of this FORMAT."""


def encode(checkpoint: Checkpoint) -> bytes:
    folds = {
        subject: [
            folding.upto,
            [
                [_NAMES[type(fold)], _ADAPTERS[_NAMES[type(fold)]].dump_python(fold, mode="json")]
                for fold in folding.folds
            ],
        ]
        for subject, folding in checkpoint.folds.items()
    }
    packed: bytes = msgpack.packb(
        {"format": FORMAT, "seq": checkpoint.seq, "folds": folds}, use_bin_type=True
    )
    return packed


def decode(data: bytes) -> Checkpoint:
    try:
        raw = msgpack.unpackb(data, raw=False, strict_map_key=False)
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            raise Unreadable(f"not a checkpoint of format {FORMAT}")
        folds: dict[str, Folding] = {}
        for subject, (upto, kinds) in raw["folds"].items():
            made: list[Fold] = [_ADAPTERS[name].validate_python(value) for name, value in kinds]
            folds[str(subject)] = Folding(tuple(made), int(upto))
        return Checkpoint(int(raw["seq"]), folds)
    except (ValidationError, KeyError, TypeError, ValueError, msgpack.UnpackException) as exc:
        if isinstance(exc, Unreadable):
            raise
        raise Unreadable(f"an unreadable checkpoint: {exc}") from exc
