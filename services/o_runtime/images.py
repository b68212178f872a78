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

import logging
from collections import OrderedDict

from nats.js import JetStreamContext
from nats.js.object_store import ObjectStore

from o_contracts.subjects import IMAGES_BUCKET
from o_runtime.content_store import ContentMissing, ContentStore, digest, ensure_object_store

__all__ = ["ImageMissing", "Images", "digest", "ensure_image_store"]

log = logging.getLogger(__name__)

# Bytes of images kept in memory after a read: an image in an agent's context goes to
# the provider again at every step of every later run.
CACHE_BYTES = 64 * 1024 * 1024


class ImageMissing(ContentMissing):
    """No image with this SHA-256 in the store (it was never put, or was removed)."""


async def ensure_image_store(js: JetStreamContext, replicas: int = 1) -> ObjectStore:
    """The images object store, created when missing (idempotent)."""
    return await ensure_object_store(
        js, IMAGES_BUCKET, "Images of messages, named by the SHA-256 of their bytes", replicas
    )


class Images(ContentStore):
    """Put and read images by their SHA-256, with an in-memory cache of recent reads."""

    missing = ImageMissing

    def __init__(self, store: ObjectStore, cache_bytes: int = CACHE_BYTES) -> None:
        super().__init__(store)
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._cached = 0
        self._cache_bytes = cache_bytes

    @classmethod
    async def open(cls, js: JetStreamContext, replicas: int = 1) -> Images:
        return cls(await ensure_image_store(js, replicas))

    async def get(self, sha256: str) -> bytes:
        """The bytes named `sha256` (checked against it); ImageMissing if none."""
        cached = self._cache.get(sha256)
        if cached is not None:
            self._cache.move_to_end(sha256)
            return cached
        data = await self.read(sha256)
        self._remember(sha256, data)
        return data

    def _remember(self, sha256: str, data: bytes) -> None:
        if len(data) > self._cache_bytes:
            return
        self._cache[sha256] = data
        self._cached += len(data)
        while self._cached > self._cache_bytes:
            _, dropped = self._cache.popitem(last=False)
            self._cached -= len(dropped)
