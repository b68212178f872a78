"""JetStream's stream snapshot and restore, spoken over core NATS (nats-py has no API for
them; the `nats stream backup` / `restore` commands of the NATS CLI speak the same).

Snapshot: a request on `$JS.API.STREAM.SNAPSHOT.<stream>` names a deliver subject; the
server answers with the stream's configuration and state, then sends the snapshot (an
S2-compressed tar of the stream's store, consumers included) in chunks on that subject,
each to be acknowledged on its reply subject (the server's flow control), and ends with
an empty message. A message with a `Status` header other than 204 is the server failing.

Restore: a request on `$JS.API.STREAM.RESTORE.<stream>` with the configuration and state
gives a subject to send the chunks to, each a request answered when taken; an empty
request ends it and is answered with the stream's creation (or the error).

The bytes are the server's own store: messages with their sequences, times and headers,
deleted ranges, the deduplication state and every consumer's position, exactly.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

API = "$JS.API"
CHUNK = 128 * 1024
# A snapshot whose next chunk does not come within this long has failed.
CHUNK_TIMEOUT = 30.0
# The server restores the whole store once the last chunk is in: that can take long.
RESTORE_TIMEOUT = 600.0


class SnapshotFailed(Exception):
    pass


def _answer(data: bytes, what: str) -> dict[str, Any]:
    try:
        body: dict[str, Any] = json.loads(data)
    except ValueError as exc:
        raise SnapshotFailed(f"{what}: not JSON: {data[:200]!r}") from exc
    error = body.get("error")
    if error:
        raise SnapshotFailed(f"{what}: {error.get('description', error)}")
    return body


def _failure(msg: Msg) -> str | None:
    """Why the server ended the snapshot, if this message says it failed."""
    headers = msg.headers or {}
    status = headers.get("Status")
    if status and status != "204":
        return f"{status} {headers.get('Description', '')}".strip()
    return None


async def snapshot(
    nc: NATS, stream: str, write: Callable[[bytes], None], chunk_size: int = CHUNK
) -> dict[str, Any]:
    """Write `stream`'s snapshot through `write`, chunk by chunk; return its configuration
    and state as the server gave them when the snapshot began."""
    chunks: asyncio.Queue[Msg] = asyncio.Queue()

    async def on_chunk(msg: Msg) -> None:
        chunks.put_nowait(msg)

    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, cb=on_chunk)
    try:
        request = {"deliver_subject": inbox, "no_consumers": False, "chunk_size": chunk_size}
        answer = await nc.request(
            f"{API}.STREAM.SNAPSHOT.{stream}", json.dumps(request).encode(), timeout=10
        )
        meta = _answer(answer.data, f"snapshot of {stream}")
        while True:
            try:
                msg = await asyncio.wait_for(chunks.get(), CHUNK_TIMEOUT)
            except TimeoutError as exc:
                raise SnapshotFailed(
                    f"snapshot of {stream}: no data for {CHUNK_TIMEOUT:g}s"
                ) from exc
            failed = _failure(msg)
            if failed:
                raise SnapshotFailed(f"snapshot of {stream}: {failed}")
            if not msg.data:
                break
            write(msg.data)
            if msg.reply:
                await nc.publish(msg.reply, b"")
        return {"config": meta.get("config", {}), "state": meta.get("state", {})}
    finally:
        await sub.unsubscribe()


async def restore(
    nc: NATS, stream: str, meta: dict[str, Any], chunks: Iterable[bytes]
) -> dict[str, Any]:
    """Make `stream` from a snapshot's chunks (it must not exist); its state as restored."""
    if meta.get("config", {}).get("name") != stream:
        raise SnapshotFailed(
            f"the snapshot is of {meta.get('config', {}).get('name')}, not {stream}"
        )
    answer = await nc.request(
        f"{API}.STREAM.RESTORE.{stream}", json.dumps(meta).encode(), timeout=10
    )
    deliver = _answer(answer.data, f"restore of {stream}")["deliver_subject"]
    for chunk in chunks:
        taken = await nc.request(deliver, chunk, timeout=CHUNK_TIMEOUT)
        if taken.data:
            _answer(taken.data, f"restore of {stream}")
    done = await nc.request(deliver, b"", timeout=RESTORE_TIMEOUT)
    created = _answer(done.data, f"restore of {stream}")
    state: dict[str, Any] = created.get("state", {})
    return state
