"""Wire type name -> message class, for decoding and for the AsyncAPI document."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from o_contracts.base import Message

_TYPES: dict[str, type[Message]] = {}


def register(cls: type[Message]) -> type[Message]:
    name = cls.type_name()
    if name in _TYPES and _TYPES[name] is not cls:
        raise RuntimeError(f"two message classes are named {name}")
    _TYPES[name] = cls
    return cls


def lookup(name: str) -> type[Message] | None:
    _ensure_loaded()
    return _TYPES.get(name)


def all_messages() -> list[type[Message]]:
    _ensure_loaded()
    return list(_TYPES.values())


def _ensure_loaded() -> None:
    # Importing the definition modules registers them; done lazily so that
    # `registry` itself has no import cycle with them.
    from o_contracts import commands, events, file_commands  # noqa: F401
