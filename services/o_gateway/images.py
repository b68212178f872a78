"""A request's images into the object store, and stored images back out for listings.

`store_images` runs before the StartRun command is built: every image of the request
is checked first (o_gateway/image_parts.py), then those sent as data are put in the
object store (o_runtime/images.py), so a bad image refuses the request with nothing
stored or sent. A retried request puts the same bytes under the same name: nothing new.

Listings show a stored image as Letta does: source type `letta` with a file id and
the base64 data (read back here; `image_data`).
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterable

from o_contracts.models import ChatMessage, ImagePart
from o_gateway.image_parts import ImageData, ImagePartBody
from o_gateway.schemas import MessageCreateBody, SendMessageBody
from o_gateway.state import Gateway
from o_runtime.images import ImageMissing


def image_parts(body: SendMessageBody) -> list[ImagePartBody]:
    """Every image part of the request: its input's or messages' content, its client
    tools' results."""
    found: list[ImagePartBody] = []
    if body.input and not isinstance(body.input, str):
        found += [p for p in body.input if isinstance(p, ImagePartBody)]
    for m in body.messages or ():
        if isinstance(m, MessageCreateBody):
            if not isinstance(m.content, str):
                found += [p for p in m.content if isinstance(p, ImagePartBody)]
        else:
            for a in m.approvals or ():
                found += [p for p in a.return_parts() or () if isinstance(p, ImagePartBody)]
    return found


async def store_images(gw: Gateway, body: SendMessageBody) -> None:
    """Check every image of `body`, then store those sent as data; each part then knows
    its ImagePart (`ImagePartBody.stored`). HTTPException (400, 413) for a bad image."""
    checked = [(part, part.checked()) for part in image_parts(body)]
    if not checked:
        return
    images = await gw.eventlog.images()
    for part, image in checked:
        if isinstance(image, ImageData):
            sha256 = await images.put(image.data)
            image = ImagePart(
                sha256=sha256,
                size=len(image.data),
                media_type=image.media_type,
                detail=image.detail,
            )
        part.keep(image)


async def image_data(gw: Gateway, messages: Iterable[ChatMessage]) -> dict[str, str]:
    """The base64 data of the stored images `messages` show, by SHA-256 (one missing
    from the store is left out: the listing shows it without data)."""
    wanted = {
        p.sha256
        for m in messages
        for p in m.parts or ()
        if isinstance(p, ImagePart) and p.sha256 is not None
    }
    if not wanted:
        return {}
    images = await gw.eventlog.images()

    async def read(sha256: str) -> tuple[str, str | None]:
        try:
            return sha256, base64.b64encode(await images.get(sha256)).decode("ascii")
        except ImageMissing:
            return sha256, None

    found = await asyncio.gather(*(read(s) for s in sorted(wanted)))
    return {sha256: data for sha256, data in found if data is not None}
