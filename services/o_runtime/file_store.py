"""Folders' files and their parsed text, in a JetStream object store named by the SHA-256
of their bytes.

The gateway puts an upload's bytes here before it appends the FileUploaded that names
them; the memory service reads them to parse, and puts the parsed text here before the
FileParsed that names it (events/folders.py says why neither travels in an event).
Named by content, a put is exactly once whatever is retried, and two uploads of the same
bytes share one object. The store is a JetStream stream like the log (file storage, the
same replicas, no age limit): the object store cuts an object into chunks itself.
"""

from __future__ import annotations

import asyncio
import weakref

from nats.js import JetStreamContext
from nats.js.object_store import ObjectStore

from o_contracts.subjects import FILES_BUCKET
from o_runtime.content_store import ContentMissing, ContentStore, ensure_object_store
from o_runtime.eventlog import EventLog


class FileMissing(ContentMissing):
    """No object with this SHA-256 in the store."""


async def ensure_file_store(js: JetStreamContext, replicas: int = 1) -> ObjectStore:
    return await ensure_object_store(
        js,
        FILES_BUCKET,
        "Folders' files and their parsed text, named by the SHA-256 of their bytes",
        replicas,
    )


class FileStore(ContentStore):
    missing = FileMissing

    @classmethod
    async def open(cls, js: JetStreamContext, replicas: int = 1) -> FileStore:
        return cls(await ensure_file_store(js, replicas))

    async def get(self, sha256: str) -> bytes:
        """The bytes named `sha256`, checked against it; FileMissing if none."""
        return await self.read(sha256)


_stores: weakref.WeakKeyDictionary[EventLog, asyncio.Task[FileStore]] = weakref.WeakKeyDictionary()


async def file_store(eventlog: EventLog) -> FileStore:
    """The files object store of this connection, opened (and created) at first use."""
    opening = _stores.get(eventlog)
    if opening is None or (opening.done() and opening.exception() is not None):
        opening = _stores[eventlog] = asyncio.ensure_future(
            FileStore.open(eventlog.js, eventlog.replicas)
        )
    return await asyncio.shield(opening)
