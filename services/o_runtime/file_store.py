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
import contextlib
import hashlib
import weakref

from nats.js import JetStreamContext
from nats.js.api import ObjectStoreConfig, StorageType
from nats.js.errors import (
    BadRequestError,
    BucketNotFoundError,
    NotFoundError,
    ObjectNotFoundError,
)
from nats.js.object_store import ObjectStore

from o_contracts.subjects import FILES_BUCKET
from o_runtime.eventlog import EventLog
from o_runtime.images import read_object


class FileMissing(LookupError):
    """No object with this SHA-256 in the store."""


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def ensure_file_store(js: JetStreamContext, replicas: int = 1) -> ObjectStore:
    """The store, made if missing (by the setup role: o_setup/topology.py)."""
    # Opened first: services may not create streams.
    with contextlib.suppress(BucketNotFoundError):
        return await js.object_store(FILES_BUCKET)
    config = ObjectStoreConfig(
        bucket=FILES_BUCKET,
        description="Folders' files and their parsed text, named by the SHA-256 of their bytes",
        storage=StorageType.FILE,
        replicas=replicas,
    )
    try:
        return await js.create_object_store(FILES_BUCKET, config=config)
    except BadRequestError:
        return await js.object_store(FILES_BUCKET)


class FileStore:
    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    @classmethod
    async def open(cls, js: JetStreamContext, replicas: int = 1) -> FileStore:
        return cls(await ensure_file_store(js, replicas))

    async def put(self, data: bytes) -> str:
        """Store `data` (unless it is there already); its SHA-256, the name it has."""
        name = digest(data)
        try:
            await self.store.get_info(name)
        except ObjectNotFoundError:
            await self.store.put(name, data)
        return name

    async def get(self, sha256: str) -> bytes:
        """The bytes named `sha256`, checked against it; FileMissing if none."""
        try:
            # (Direct gets, no consumer: images.read_object says why.)
            data = await read_object(self.store, FILES_BUCKET, sha256)
        except (ObjectNotFoundError, NotFoundError) as exc:
            raise FileMissing(sha256) from exc
        if digest(data) != sha256:
            raise FileMissing(sha256)
        return data


_stores: weakref.WeakKeyDictionary[EventLog, asyncio.Task[FileStore]] = weakref.WeakKeyDictionary()


async def file_store(eventlog: EventLog) -> FileStore:
    """The files object store of this connection, opened (and created) at first use."""
    opening = _stores.get(eventlog)
    if opening is None or (opening.done() and opening.exception() is not None):
        opening = _stores[eventlog] = asyncio.ensure_future(
            FileStore.open(eventlog.js, eventlog.replicas)
        )
    return await asyncio.shield(opening)
