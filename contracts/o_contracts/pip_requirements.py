"""A package a user's tool needs, as Letta writes it: `{"name": "requests", "version": "2.32.3"}`.

The sandbox installs a tool's packages with pip, so what reaches pip's command line is held to
a requirement's grammar here: a distribution name (PEP 508) and, optionally, an exact version
or a version specifier. Nothing else (no URL, path, option or environment marker) can pass,
so a requirement can never make pip read a file, fetch from another index or take a flag.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

# PEP 508's name, with extras ("requests[socks]").
_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?(?:\[[A-Za-z0-9._,-]+\])?$")
# A bare version ("2.32.3", "1.0rc1", "2.*") or specifiers (">=2,<3", "~=1.4").
_VERSION = re.compile(r"^[A-Za-z0-9.*+!_-]+$")
_SPECIFIERS = re.compile(r"^(?:(?:===|==|!=|~=|>=|<=|>|<)\s*[A-Za-z0-9.*+!_-]+\s*,?\s*)+$")
MAX_REQUIREMENTS = 64


class PipRequirement(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str = Field(min_length=1, max_length=128)
    version: str | None = Field(default=None, max_length=128)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"'{value}' is not a package name")
        return value

    @field_validator("version")
    @classmethod
    def _version(cls, value: str | None) -> str | None:
        if value is None or value.strip() == "":
            return None
        value = value.strip()
        if not (_VERSION.match(value) or _SPECIFIERS.match(value)):
            raise ValueError(f"'{value}' is not a version or version specifier")
        return value

    def spec(self) -> str:
        """What pip is given: `name==version` (Letta's form), `name>=x` for a specifier."""
        if self.version is None:
            return self.name
        if self.version[0] in "<>=!~":
            return self.name + self.version.replace(" ", "")
        return f"{self.name}=={self.version}"


def specs(requirements: list[PipRequirement]) -> list[str]:
    """pip's arguments for these requirements, each once, in a stable order."""
    return sorted({r.spec() for r in requirements})
