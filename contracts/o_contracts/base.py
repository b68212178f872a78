"""Base classes for every message on the wire.

One pydantic model per event or command. The class name is the wire `type`;
`schema_version` says which shape of the payload the producer wrote, and
`upcast` lifts older payloads to the current shape on read, so old events in
the log stay readable forever.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from o_contracts.registry import register


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: ClassVar[int] = 1
    kind: ClassVar[str] = "message"
    # Abstract bases set this so they are not registered as wire types.
    abstract: ClassVar[bool] = True

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if not cls.__dict__.get("abstract", False):
            register(cls)

    @classmethod
    def type_name(cls) -> str:
        return cls.__name__

    @classmethod
    def upcast(cls, version: int, data: dict[str, Any]) -> dict[str, Any]:
        """Turn a payload written at `version` into the current shape.

        Subclasses override this when they bump `schema_version`.
        """
        return data


class Event(Message):
    """A fact that happened. Past tense: `BlockUpdated`, `RunCompleted`."""

    kind: ClassVar[str] = "event"
    abstract: ClassVar[bool] = True


class Command(Message):
    """A request to the owning service to decide something. Imperative: `UpdateBlock`."""

    kind: ClassVar[str] = "command"
    abstract: ClassVar[bool] = True


class Reply(BaseModel):
    """The answer a command handler sends to the `O-Reply-To` inbox, when one is given."""

    model_config = ConfigDict(extra="forbid")

    ok: bool
    error: str | None = None
    status: int = 200
    seq: int | None = None
    result: dict[str, Any] | None = None
