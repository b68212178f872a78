"""Request bodies of `/v1/providers/` (Letta's ProviderCreate, ProviderUpdate and
ProviderCheck). Keys and access keys are stripped of surrounding whitespace, as Letta
does; an empty base_url means none."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from o_contracts.limits import MAX_NAME_CHARS

# Long enough for any provider's key or URL, short enough to keep events small.
MAX_SECRET_CHARS = 4096
Secret = Annotated[str, StringConstraints(strip_whitespace=True, max_length=MAX_SECRET_CHARS)]
Url = Annotated[str, StringConstraints(strip_whitespace=True, max_length=MAX_SECRET_CHARS)]
Name = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_NAME_CHARS)
]


class _Connection(BaseModel):
    model_config = ConfigDict(extra="ignore")

    access_key: Secret | None = None
    region: Annotated[str, Field(max_length=MAX_NAME_CHARS)] | None = None
    base_url: Url | None = None
    api_version: Annotated[str, Field(max_length=MAX_NAME_CHARS)] | None = None

    @field_validator("base_url")
    @classmethod
    def empty_is_none(cls, value: str | None) -> str | None:
        return value or None


class CreateProviderBody(_Connection):
    name: Name
    provider_type: Annotated[str, Field(max_length=MAX_NAME_CHARS)]
    api_key: Secret


class UpdateProviderBody(_Connection):
    api_key: Secret


class CheckProviderBody(_Connection):
    provider_type: Annotated[str, Field(max_length=MAX_NAME_CHARS)]
    api_key: Secret
