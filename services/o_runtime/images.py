"""Images of messages, in a JetStream object store named by the SHA-256 of their bytes.

An image can be several MiB: more than NATS takes in one message (1 MiB), so it never
travels in a command or an event. The gateway puts its bytes here before it sends the
command that names them (`ImagePart.sha256`), and the executor reads them back to build
the provider's request. Named by content, a put is exactly once whatever is retried: a
second put of the same bytes finds them there and does nothing.

The store is a JetStream stream like the log (file storage, the same replicas, no age
limit): an image lives as long as the messages that show it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections import OrderedDict

from nats.js import JetStreamContext
from nats.js.api import ObjectStoreConfig, StorageType
from nats.js.errors import (
    BadRequestError,
    BucketNotFoundError,
    NotFoundError,
    ObjectNotFoundError,
)
from nats.js.object_store import ObjectStore

from o_contracts.subjects import IMAGES_BUCKET

log = logging.getLogger(__name__)

# Bytes of images kept in memory after a read: an image in an agent's context goes to
# the provider again at every step of every later run.
CACHE_BYTES = 64 * 1024 * 1024


class ImageMissing(LookupError):
    """No image with this SHA-256 in the store (it was never put, or was removed)."""


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def ensure_image_store(js: JetStreamContext, replicas: int = 1) -> ObjectStore:
    """The images object store, created when missing (idempotent)."""
    config = ObjectStoreConfig(
        bucket=IMAGES_BUCKET,
        description="Images of messages, named by the SHA-256 of their bytes",
        storage=StorageType.FILE,
        replicas=replicas,
    )
    # Opened first: services may not create streams (the setup role made it: o_setup).
    with contextlib.suppress(BucketNotFoundError):
        return await js.object_store(IMAGES_BUCKET)
    try:
        return await js.create_object_store(IMAGES_BUCKET, config=config)
    except BadRequestError:
        # Made meanwhile, or exists with other settings: use it as it is.
        return await js.object_store(IMAGES_BUCKET)


async def read_object(store: ObjectStore, bucket: str, name: str) -> bytes:
    """An object's chunks, read one by one with direct gets.

    nats-py's `ObjectStore.get` reads them through a consumer, and an identity that may
    make consumers on an object store's stream could point one at any subject: these bytes
    come from users, and must never be relayed into the log (docs/security.md). Direct
    gets need no consumer.
    """
    info = await store.get_info(name)
    if not info.size:
        return b""
    js, stream = store._js, f"OBJ_{bucket}"
    subject = f"$O.{bucket}.C.{info.nuid}"
    data = bytearray()
    seq = 0
    while len(data) < info.size:
        msg = await js.get_msg(stream, seq=seq + 1, subject=subject, next=True, direct=True)
        data += msg.data or b""
        seq = int(msg.seq or 0)
    return bytes(data)


class Images:
    """Put and read images by their SHA-256, with an in-memory cache of recent reads."""

    def __init__(self, store: ObjectStore, cache_bytes: int = CACHE_BYTES) -> None:
        self.store = store
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._cached = 0
        self._cache_bytes = cache_bytes

    @classmethod
    async def open(cls, js: JetStreamContext, replicas: int = 1) -> Images:
        return cls(await ensure_image_store(js, replicas))

    async def put(self, data: bytes) -> str:
        """Store `data` (unless it is there already); its SHA-256, the name it has."""
        name = digest(data)
        try:
            await self.store.get_info(name)
        except ObjectNotFoundError:
            await self.store.put(name, data)
        return name

    async def get(self, sha256: str) -> bytes:
        """The bytes named `sha256` (checked against it); ImageMissing if none."""
        cached = self._cache.get(sha256)
        if cached is not None:
            self._cache.move_to_end(sha256)
            return cached
        try:
            data = await self._read(sha256)
        except (ObjectNotFoundError, NotFoundError) as exc:
            raise ImageMissing(sha256) from exc
        if digest(data) != sha256:  # named by content: anything else is not this image
            raise ImageMissing(sha256)
        self._remember(sha256, data)
        return data

    async def _read(self, name: str) -> bytes:
        return await read_object(self.store, IMAGES_BUCKET, name)

    def _remember(self, sha256: str, data: bytes) -> None:
        if len(data) > self._cache_bytes:
            return
        self._cache[sha256] = data
        self._cached += len(data)
        while self._cached > self._cache_bytes:
            _, dropped = self._cache.popitem(last=False)
            self._cached -= len(dropped)
