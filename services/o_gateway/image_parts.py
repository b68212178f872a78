"""Image content parts as Letta clients send them, checked and decoded.

Letta's `{"type": "image", "source": ...}` with a source of type `base64`
(media_type, data), `url` (http, https or a `data:` URL) or `letta` (a stored image
as Letta lists it, with its data). Images sent as data become bytes for the object
store (o_gateway/images.py puts them); http(s) URLs go to the provider as they are:
O never fetches them (Letta does, and stores what it got).

Bad images are refused before anything is stored or sent: 400 for a value Letta
would also refuse (a URL scheme other than http, https and data; a malformed data
URL), and for what the providers would refuse later (a media type other than
JPEG, PNG, GIF and WebP; data that is not base64); 413 for an image over
`MAX_IMAGE_BYTES`.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import HTTPException
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from o_contracts.limits import MAX_IMAGE_BYTES
from o_contracts.models import IMAGE_MEDIA_TYPES, ImagePart

# An http(s) image URL, in characters (a data: URL is bounded as image data).
MAX_IMAGE_URL_CHARS = 8192
Detail = Annotated[str, Field(max_length=16)]
MediaType = Annotated[str, Field(max_length=128)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Base64Source(_Body):
    type: Literal["base64"]
    media_type: MediaType
    data: str
    detail: Detail | None = None


class UrlSource(_Body):
    type: Literal["url"]
    url: str


class LettaSource(_Body):
    """A stored image as Letta lists it; sent back, its data is what counts."""

    type: Literal["letta"]
    file_id: str = Field(max_length=256)
    media_type: MediaType | None = None
    data: str | None = None
    detail: Detail | None = None


@dataclass(frozen=True)
class ImageData:
    """An image's bytes, for the object store."""

    data: bytes
    media_type: str
    detail: str | None


class ImagePartBody(_Body):
    type: Literal["image"]
    source: Annotated[Base64Source | UrlSource | LettaSource, Field(discriminator="type")]
    # Set once its bytes are in the object store (o_gateway/images.store_images).
    _stored: ImagePart | None = PrivateAttr(default=None)

    def checked(self) -> ImageData | ImagePart:
        """Its bytes to store, or (an http(s) URL) the part as it is; HTTPException if bad."""
        src = self.source
        if isinstance(src, UrlSource):
            return _from_url(src.url)
        if src.data is None:
            raise HTTPException(
                400, "an image with source type 'letta' needs its data (base64) to be sent"
            )
        return ImageData(_decoded(src.data), _media_type(src.media_type), src.detail)

    def keep(self, part: ImagePart) -> None:
        self._stored = part

    def stored(self) -> ImagePart:
        if self._stored is None:
            raise RuntimeError("an image part was used before it was stored")
        return self._stored


def _media_type(value: str | None) -> str:
    media_type = (value or "").strip().lower()
    if media_type == "image/jpg":  # a common misspelling providers refuse
        media_type = "image/jpeg"
    if media_type not in IMAGE_MEDIA_TYPES:
        raise HTTPException(
            400,
            f"unsupported image media type {value!r}: send one of {', '.join(IMAGE_MEDIA_TYPES)}",
        )
    return media_type


def _decoded(data: str) -> bytes:
    # Checked by its length first: a base64 text 4/3 the size of the bytes it holds.
    if len(data) * 3 // 4 > MAX_IMAGE_BYTES + 3:
        raise _too_large(len(data) * 3 // 4)
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise HTTPException(400, f"image data is not valid base64: {exc}") from exc
    if len(raw) > MAX_IMAGE_BYTES:
        raise _too_large(len(raw))
    if not raw:
        raise HTTPException(400, "image data is empty")
    return raw


def _too_large(size: int) -> HTTPException:
    return HTTPException(
        413, f"an image of about {size} bytes is over the limit of {MAX_IMAGE_BYTES} bytes"
    )


def _from_url(url: str) -> ImageData | ImagePart:
    scheme = url.partition(":")[0].lower()
    if scheme == "data":
        header, comma, data = url.partition(",")
        params = header[len("data:") :].split(";")
        if not comma or "base64" not in params[1:]:
            raise HTTPException(400, "a data: image URL must be data:<media type>;base64,<data>")
        return ImageData(_decoded(data), _media_type(params[0]), None)
    if scheme not in ("http", "https"):
        raise HTTPException(
            400,
            f"unsupported image URL scheme '{scheme or '<missing>'}': only http, https and data"
            " image URLs are supported",
        )
    if len(url) > MAX_IMAGE_URL_CHARS:
        raise HTTPException(
            400, f"an image URL is {len(url)} characters, over the limit of {MAX_IMAGE_URL_CHARS}"
        )
    return ImagePart(url=url)


def without_image_data(value: Any) -> Any:
    """`value` (a client tool's result) with image parts' data left out, to size its text."""
    if not isinstance(value, list):
        return value
    return [
        {"type": "image"} if isinstance(item, dict) and item.get("type") == "image" else item
        for item in value
    ]
