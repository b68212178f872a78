"""A client's retry of a request is the same request: its run id comes from its idempotency key.

A client whose request failed on the way (a dropped connection, a timeout, a
503 while a service restarted) cannot know whether it was accepted. It sends
it again with the same key: an `Idempotency-Key` header, or Letta's `otid`
on each input message (Letta clients give every message one). The run's id is
derived from the agent and the key, so the retry names the run the first try
started: found in the log, it is answered from there (or followed until it
ends); not found, it is started now, once (the command's id derives from the
run's, so two tries racing each other are one command in the stream).

Otids name messages, not requests: a client may send a message again, under its
otid, as a new turn (Letta's `test_invoke_tool_after_turning_off_requires_approval`
asks the same question again once an approval changed the answer, streamed this
time). So an otid key is the otids and a digest of the whole request
(`request_digest`: every field, and how it is answered): only the same request,
sent the same way, is a retry. An `Idempotency-Key` names the request itself and
is the key alone.

Creating an agent, a block or an archival passage works the same way with an
`Idempotency-Key`: the new resource's id and its commands' ids derive from
the key, and every command handler answers a repeat from its record.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Annotated

from fastapi import Header, HTTPException
from pydantic import BaseModel

from o_contracts.ids import IdPrefix, derived_id, new_id

MAX_KEY_LENGTH = 255

# A route parameter: the request's `Idempotency-Key` header, if any.
IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key")]


def checked_key(header: str | None) -> str | None:
    if header is None:
        return None
    if not header or len(header) > MAX_KEY_LENGTH or not header.isprintable():
        raise HTTPException(422, f"Idempotency-Key must be 1-{MAX_KEY_LENGTH} printable characters")
    return f"key:{header}"


def resource_id(prefix: IdPrefix, key: str | None, *scope: str) -> str:
    """A new resource's id: derived from the key when the client may retry, else fresh.

    The same key gives the same id, so the retry's command names what the first
    try created, and the handler answers it from the record.
    """
    return derived_id(prefix, *scope, key) if key is not None else new_id(prefix)


def request_digest(body: BaseModel, delivery: str) -> str:
    """What a request asks, as a digest: its body (every field, defaults included, so a
    field left out and the same field sent with its default are one request) and how
    it is answered (`delivery`: JSON, a stream, an async run)."""
    asked = {"delivery": delivery, "body": body.model_dump(mode="json", exclude={"streaming"})}
    canonical = json.dumps(asked, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def request_key(
    header: str | None, otids: Sequence[str | None], digest: str | None = None
) -> str | None:
    """The request's idempotency key: the header, else the input messages' otids (all of
    them) with the request's digest."""
    if header is not None:
        return checked_key(header)
    if otids and all(otids):
        return "otid:" + "\n".join(o for o in otids if o) + (f"\n{digest}" if digest else "")
    return None


def run_id_for(agent_id: str, key: str) -> str:
    return derived_id("run", agent_id, key)


def command_id_for(run_id: str) -> str:
    return derived_id("cmd", run_id, "start")


def message_id_for(run_id: str, index: int) -> str:
    return derived_id("message", run_id, "input", str(index))
