"""Request bodies of `/v1/mcp-servers/`, in Letta's shapes: a `server_name` and a
`config` told apart by `mcp_server_type` (stdio, sse, streamable_http)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, StringConstraints

from o_contracts.limits import MAX_LIST_ITEMS, MAX_NAME_CHARS, MAX_OBJECT_BYTES, check_storable
from o_gateway.schemas import Body


def _bounded(value: Any) -> Any:
    check_storable(value, max_bytes=MAX_OBJECT_BYTES)
    return value


ServerName = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME_CHARS)]
Url = Annotated[str, StringConstraints(min_length=1, max_length=2048)]
Arg = Annotated[str, StringConstraints(max_length=4096)]
Args = Annotated[list[Arg], Field(max_length=MAX_LIST_ITEMS)]
# Header names and environment variable names with their (secret) values.
StrMap = Annotated[
    dict[Annotated[str, StringConstraints(min_length=1, max_length=256)], str],
    AfterValidator(_bounded),
]
Token = Annotated[str, StringConstraints(max_length=8192)]


class StdioConfig(Body):
    mcp_server_type: Literal["stdio"] = "stdio"
    command: str = Field(min_length=1, max_length=4096)
    args: Args
    env: StrMap | None = None


class HttpConfig(Body):
    server_url: Url
    auth_header: Annotated[str, StringConstraints(min_length=1, max_length=256)] | None = None
    auth_token: Token | None = None
    custom_headers: StrMap | None = None


class SseConfig(HttpConfig):
    mcp_server_type: Literal["sse"] = "sse"


class StreamableHttpConfig(HttpConfig):
    mcp_server_type: Literal["streamable_http"] = "streamable_http"


class CreateMcpServerBody(Body):
    server_name: ServerName
    config: Annotated[
        StdioConfig | SseConfig | StreamableHttpConfig, Field(discriminator="mcp_server_type")
    ]


# Updates: the same fields, each optional; only those sent change.
class UpdateStdioConfig(Body):
    mcp_server_type: Literal["stdio"] = "stdio"
    command: str | None = Field(default=None, min_length=1, max_length=4096)
    args: Args | None = None
    env: StrMap | None = None


class UpdateHttpConfig(Body):
    server_url: Url | None = None
    auth_header: Annotated[str, StringConstraints(min_length=1, max_length=256)] | None = None
    auth_token: Token | None = None
    custom_headers: StrMap | None = None


class UpdateSseConfig(UpdateHttpConfig):
    mcp_server_type: Literal["sse"] = "sse"


class UpdateStreamableHttpConfig(UpdateHttpConfig):
    mcp_server_type: Literal["streamable_http"] = "streamable_http"


class UpdateMcpServerBody(Body):
    server_name: ServerName | None = None
    config: (
        Annotated[
            UpdateStdioConfig | UpdateSseConfig | UpdateStreamableHttpConfig,
            Field(discriminator="mcp_server_type"),
        ]
        | None
    ) = None


class RunMcpToolBody(Body):
    args: Annotated[dict[str, Any], AfterValidator(_bounded)] = Field(default_factory=dict)
