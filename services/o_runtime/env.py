"""Reading settings from the environment, once, at a service's start: typed and validated,
with an error that names the variable and what it must be (a bad value stops the service
at start instead of surfacing later, mid-request)."""

from __future__ import annotations

import os
from collections.abc import Mapping

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


class BadSetting(ValueError):
    """An environment variable holds a value it cannot have."""


class Env:
    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.environ = dict(os.environ if environ is None else environ)

    def text(self, name: str, default: str) -> str:
        return self.environ.get(name) or default

    def optional(self, name: str) -> str | None:
        return self.environ.get(name) or None

    def number(self, name: str, default: float, *, minimum: float | None = None) -> float:
        raw = self.environ.get(name)
        if raw is None or raw == "":
            return default
        try:
            value = float(raw)
        except ValueError:
            raise BadSetting(f"{name} must be a number, not {raw!r}") from None
        if minimum is not None and value < minimum:
            raise BadSetting(f"{name} must be at least {minimum:g}, not {raw}")
        return value

    def integer(self, name: str, default: int, *, minimum: int | None = None) -> int:
        raw = self.environ.get(name)
        if raw is None or raw == "":
            return default
        try:
            value = int(raw)
        except ValueError:
            raise BadSetting(f"{name} must be a whole number, not {raw!r}") from None
        if minimum is not None and value < minimum:
            raise BadSetting(f"{name} must be at least {minimum}, not {raw}")
        return value

    def flag(self, name: str, default: bool = False) -> bool:
        if self.environ.get(name) is None:
            return default
        raw = (self.environ.get(name) or "").strip().lower()
        if raw in _TRUE:
            return True
        if raw in _FALSE:
            return False
        raise BadSetting(f"{name} must be 1 or 0 (true or false), not {raw!r}")
