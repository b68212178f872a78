"""A JetStream object store whose objects are named by the SHA-256 of their bytes.

Images of messages (images.py) and folders' files (file_store.py) are kept so: too large
to travel in an event, they are put here before the event or command that names them.
Named by content, a put is exactly once whatever is retried (a second put of the same
bytes finds them there and does nothing), and a read is checked against its name. Each
store is a JetStream stream like the log (file storage, the same replicas, no age limit).
"""

from __future__ import annotations

import contextlib
import hashlib

from nats.js import JetStreamContext
from nats.js.api import ObjectStoreConfig, StorageType
from nats.js.errors import (
    BadRequestError,
    BucketNotFoundError,
    NotFoundError,
    ObjectNotFoundError,
)
from nats.js.object_store import ObjectStore


class ContentMissing(LookupError):
    """No object with this SHA-256 in the store (never put, or removed)."""


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def ensure_object_store(
    js: JetStreamContext, bucket: str, description: str, replicas: int = 1
) -> ObjectStore:
    """The object store `bucket`, created when missing (idempotent)."""
    # Opened first: services may not create streams (the setup role made it: o_setup).
    with contextlib.suppress(BucketNotFoundError):
        return await js.object_store(bucket)
    config = ObjectStoreConfig(
        bucket=bucket, description=description, storage=StorageType.FILE, replicas=replicas
    )
    try:
        return await js.create_object_store(bucket, config=config)
    except BadRequestError:
        # Made meanwhile, or exists with other settings: use it as it is.
        return await js.object_store(bucket)


async def read_object(store: ObjectStore, name: str) -> bytes:
    """An object's chunks, read one by one with direct gets.

    nats-py's `ObjectStore.get` reads them through a consumer, and an identity that may
    make consumers on an object store's stream could point one at any subject: these bytes
    come from users, and must never be relayed into the log (docs/security.md). Direct
    gets need no consumer.
    """
    info = await store.get_info(name)
    if not info.size:
        return b""
    # (nats-py keeps the bucket's name and stream private; they are fixed by the protocol.)
    bucket = store._name
    subject = f"$O.{bucket}.C.{info.nuid}"
    data = bytearray()
    seq = 0
    while len(data) < info.size:
        msg = await store._js.get_msg(
            store._stream, seq=seq + 1, subject=subject, next=True, direct=True
        )
        data += msg.data or b""
        seq = int(msg.seq or 0)
    return bytes(data)


class ContentStore:
    """Put and read bytes by their SHA-256."""

    # What a read of a name the store does not hold raises (a subclass's own kind).
    missing: type[ContentMissing] = ContentMissing

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    async def put(self, data: bytes) -> str:
        """Store `data` (unless it is there already); its SHA-256, the name it has."""
        name = digest(data)
        try:
            await self.store.get_info(name)
        except ObjectNotFoundError:
            await self.store.put(name, data)
        return name

    async def read(self, sha256: str) -> bytes:
        """The bytes named `sha256`, checked against it; `missing` if none."""
        try:
            data = await read_object(self.store, sha256)
        except (ObjectNotFoundError, NotFoundError) as exc:
            raise self.missing(sha256) from exc
        if digest(data) != sha256:  # named by content: anything else is not this object
            raise self.missing(sha256)
        return data
