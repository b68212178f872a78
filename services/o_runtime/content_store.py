"""A JetStream object store whose objects are named by the SHA-256 of their bytes.

Images of messages (images.py) and folders' files (file_store.py) are kept so: too large
to travel in an event, they are put here before the event or command that names them.
Named by content, a put is exactly once whatever is retried (a second put of the same
bytes finds them there and does nothing), and a read is checked against its name. Each
store is a JetStream stream like the log (file storage, the same replicas, no age limit).
"""

from __future__ import annotations

import hashlib

from nats.js import JetStreamContext
from nats.js.api import ObjectStoreConfig, StorageType
from nats.js.errors import BadRequestError, ObjectNotFoundError
from nats.js.object_store import ObjectStore


class ContentMissing(LookupError):
    """No object with this SHA-256 in the store (never put, or removed)."""


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def ensure_object_store(
    js: JetStreamContext, bucket: str, description: str, replicas: int = 1
) -> ObjectStore:
    """The object store `bucket`, created when missing (idempotent)."""
    config = ObjectStoreConfig(
        bucket=bucket, description=description, storage=StorageType.FILE, replicas=replicas
    )
    try:
        return await js.create_object_store(bucket, config=config)
    except BadRequestError:
        # Exists with other settings (replicas changed): use it as it is.
        return await js.object_store(bucket)


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
            result = await self.store.get(sha256)
        except ObjectNotFoundError as exc:
            raise self.missing(sha256) from exc
        data = result.data or b""
        if digest(data) != sha256:  # named by content: anything else is not this object
            raise self.missing(sha256)
        return data
