"""The hash chain of an agent's evolution decisions: each carries the hash of the one before.

Pure functions, no I/O. Every evolution decision (proposed, judged, promoted,
rolled out, aborted, ...) is an event on the agent's evolution subject. Its hash
covers the previous decision's hash and its own decision fields, so editing,
inserting or deleting a decision in the history breaks every later link, and
`verify` names the first one that no longer holds.

What is hashed: the event's decision fields in JSON mode (`model_dump(mode="json")`)
WITHOUT the `hash` field itself. Only the payload is covered, not the stream's
`seq` nor the event `type`; a caller that wants the type protected puts it in
the payload.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# The prev_hash of an agent's first decision.
GENESIS = "0" * 64


def canonical(payload: Mapping[str, Any]) -> bytes:
    """The payload's bytes, the same whatever order its keys were built in.

    Pass the decision fields in JSON mode and without the `hash` field; `default=str`
    only catches stragglers (a datetime left unconverted), it is not the contract.
    """
    return json.dumps(
        payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    ).encode()


def link_hash(prev_hash: str, payload: Mapping[str, Any]) -> str:
    """sha256 hex of the previous hash, a newline, and the canonical payload."""
    return hashlib.sha256(prev_hash.encode() + b"\n" + canonical(payload)).hexdigest()


@dataclass(frozen=True)
class Link:
    """One decision as read back from the subject."""

    seq: int
    prev_hash: str
    hash: str
    payload: Mapping[str, Any]
    type: str


@dataclass(frozen=True)
class BrokenLink:
    seq: int
    type: str
    reason: str


def verify(links: Iterable[Link]) -> BrokenLink | None:
    """The first link that does not hold, walking in the given order; None when all hold.

    The link to the previous decision is checked before the content: a deleted
    or reordered decision shows as the next one pointing elsewhere, which says
    more than its (then also wrong) hash would.
    """
    expected_prev, prev_seq = GENESIS, None
    for link in links:
        if link.prev_hash != expected_prev:
            reason = (
                "prev_hash is not the genesis hash"
                if prev_seq is None
                else f"prev_hash does not match the hash of seq {prev_seq}"
            )
            return BrokenLink(link.seq, link.type, reason)
        if link_hash(link.prev_hash, link.payload) != link.hash:
            return BrokenLink(link.seq, link.type, "hash does not match its content")
        expected_prev, prev_seq = link.hash, link.seq
    return None
