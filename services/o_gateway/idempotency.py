"""A client's retry of a request is the same request: its run id comes from its idempotency key.

A client whose request failed on the way (a dropped connection, a timeout, a
503 while a service restarted) cannot know whether it was accepted. It sends
it again with the same key: an `Idempotency-Key` header, or Letta's `otid`
on each input message (Letta clients give every message one). The run's id is
derived from the agent and the key, so the retry names the run the first try
started: found in the log, it is answered from there (or followed until it
ends); not found, it is started now, once (the command's id derives from the
run's, so two tries racing each other are one command in the stream).
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import HTTPException

from o_contracts.ids import derived_id

MAX_KEY_LENGTH = 255


def request_key(header: str | None, otids: Sequence[str | None]) -> str | None:
    """The request's idempotency key: the header, else the input messages' otids (all of them)."""
    if header is not None:
        if not header or len(header) > MAX_KEY_LENGTH or not header.isprintable():
            raise HTTPException(
                422, f"Idempotency-Key must be 1-{MAX_KEY_LENGTH} printable characters"
            )
        return f"key:{header}"
    if otids and all(otids):
        return "otid:" + "\n".join(o for o in otids if o)
    return None


def run_id_for(agent_id: str, key: str) -> str:
    return derived_id("run", agent_id, key)


def command_id_for(run_id: str) -> str:
    return derived_id("cmd", run_id, "start")


def message_id_for(run_id: str, index: int) -> str:
    return derived_id("message", run_id, "input", str(index))
