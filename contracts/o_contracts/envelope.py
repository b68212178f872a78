"""The envelope every event and command travels in, MessagePack on the wire.

Fields as DESIGN.md names them: id (also sent as `Nats-Msg-Id`, so a retried
publish is deduplicated by the stream), type, schema version, aggregate id,
causation and correlation ids, time, producer — and the payload.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

import msgpack
from pydantic import BaseModel, ConfigDict, ValidationError

from o_contracts.base import Message
from o_contracts.ids import new_id
from o_contracts.limits import Unstorable, check_storable
from o_contracts.registry import lookup

M = TypeVar("M", bound=Message)


class MalformedMessage(ValueError):
    """Bytes that are not a valid envelope of a known message type."""


class Envelope(BaseModel, Generic[M]):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    id: str
    type: str
    schema_version: int
    aggregate_id: str
    causation_id: str | None = None
    correlation_id: str | None = None
    time: datetime
    producer: str
    data: M

    @classmethod
    def wrap(
        cls,
        data: M,
        *,
        aggregate_id: str,
        producer: str,
        id: str | None = None,
        causation_id: str | None = None,
        correlation_id: str | None = None,
        time: datetime | None = None,
    ) -> Envelope[M]:
        return Envelope[M](
            id=id or new_id("evt"),
            type=data.type_name(),
            schema_version=data.schema_version,
            aggregate_id=aggregate_id,
            causation_id=causation_id,
            correlation_id=correlation_id,
            time=time or datetime.now(UTC),
            producer=producer,
            data=data,
        )

    def caused(
        self, data: M2, *, aggregate_id: str, producer: str, id: str | None = None
    ) -> Envelope[M2]:
        """An envelope for a message that this one caused (same correlation)."""
        return Envelope.wrap(
            data,
            aggregate_id=aggregate_id,
            producer=producer,
            id=id,
            causation_id=self.id,
            correlation_id=self.correlation_id or self.id,
        )

    def encode(self) -> bytes:
        body = {
            "id": self.id,
            "type": self.type,
            "v": self.schema_version,
            "aggregate_id": self.aggregate_id,
            "causation_id": self.causation_id,
            "correlation_id": self.correlation_id,
            "time": self.time.isoformat(),
            "producer": self.producer,
            "data": self.data.model_dump(mode="json"),
        }
        packed: bytes = msgpack.packb(body, use_bin_type=True)
        return packed


M2 = TypeVar("M2", bound=Message)

_REQUIRED = ("id", "type", "v", "aggregate_id", "time", "producer", "data")


def known_type(raw: bytes) -> str | None:
    """The registered message type `raw` claims to be, without validating it; else None.

    For consumers that skip most messages: only those they handle (or that are
    not even well-formed enough to name a known type) need a full decode().
    """
    try:
        body = msgpack.unpackb(raw, raw=False)
    except Exception:
        return None
    kind = body.get("type") if isinstance(body, dict) else None
    if not isinstance(kind, str) or lookup(kind) is None:
        return None
    return kind


def decode(raw: bytes, storable: bool = False) -> Envelope[Message]:
    """Bytes to a validated envelope; old payload versions are upcast.

    With `storable`, the payload must also be something O can record (no NUL,
    no integer beyond 64 bits, not nested too deep: limits.py): consumers of
    commands from outside check it, so a bad value is refused before any event
    carries it into a projection. Raises MalformedMessage with a reason a human
    can act on.
    """
    try:
        body = msgpack.unpackb(raw, raw=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise MalformedMessage(f"not MessagePack: {exc}") from exc
    if not isinstance(body, dict):
        raise MalformedMessage("envelope is not a map")
    missing = [k for k in _REQUIRED if k not in body]
    if missing:
        raise MalformedMessage(f"envelope lacks {', '.join(missing)}")
    cls = lookup(str(body["type"]))
    if cls is None:
        raise MalformedMessage(f"unknown message type '{body['type']}'")
    version = body["v"]
    if (
        isinstance(version, bool)
        or not isinstance(version, int)
        or version < 1
        or version > cls.schema_version
    ):
        raise MalformedMessage(
            f"{cls.type_name()} schema version {version!r} is not readable "
            f"(this build reads 1..{cls.schema_version})"
        )
    data = body["data"]
    if not isinstance(data, dict):
        raise MalformedMessage("payload is not a map")
    if storable:
        try:
            check_storable(data, "data", max_text_bytes=None)
        except Unstorable as exc:
            raise MalformedMessage(f"invalid {cls.type_name()}: {exc}") from exc
    if version < cls.schema_version:
        try:
            data = cls.upcast(version, data)
        except Exception as exc:  # an old payload the upcaster cannot read
            raise MalformedMessage(f"cannot upcast {cls.type_name()} v{version}: {exc!r}") from exc
    try:
        payload = cls.model_validate(data)
        return Envelope[Message](
            id=body["id"],
            type=cls.type_name(),
            schema_version=cls.schema_version,
            aggregate_id=body["aggregate_id"],
            causation_id=body.get("causation_id"),
            correlation_id=body.get("correlation_id"),
            time=body["time"],
            producer=body["producer"],
            data=payload,
        )
    except ValidationError as exc:
        raise MalformedMessage(f"invalid {cls.type_name()}: {_first_error(exc)}") from exc


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "payload"
    return f"{where}: {err.get('msg', 'invalid')}"


def wire_dict(env: Envelope[Any]) -> dict[str, Any]:
    """The decoded form of an envelope, for JSON logs and dead letters."""
    out: dict[str, Any] = msgpack.unpackb(env.encode(), raw=False)
    return out
