"""Resource ids: `<prefix>-<uuid4>`, as the Letta API uses them.

Ids end up in NATS subjects, so they must never contain `.`, `*` or `>`; the
uuid form guarantees that, and `parse_id` rejects anything else at the edge.
"""

from __future__ import annotations

import re
import uuid
from typing import Literal

IdPrefix = Literal[
    "agent",
    "block",
    "tool",
    "message",
    "run",
    "step",
    "passage",
    "cmd",
    "evt",
    "conv",
    "file",
    # Letta names folders' ids "source-<uuid>" (folders were sources first).
    "source",
    "file_agent",
    "mcp_server",
    # An MCP server's OAuth sign-in (docs/mcp.md).
    "mcp_oauth",
    "group",
    "proposal",
    "rollout",
    # A completion callback's delivery (one per run that asked for one).
    "callback",
    "schedule",
    # A model provider registered through the API (Letta's "provider-<uuid>").
    "provider",
    # An archive: archival passages agents share (Letta's "archive-<uuid>").
    "archive",
    # An identity an application's agents serve (Letta's "identity-<uuid>").
    "identity",
    # A sandbox configuration (Letta's "sandbox-<uuid>"; its variables: "sandbox-env-<uuid>").
    "sandbox",
    # A step's exchange with its model provider (Letta's "provider_trace-<uuid>").
    "provider_trace",
]

_ID_RE = re.compile(
    r"^(?P<prefix>[a-z_]+)-(?P<uuid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$"
)

# A fixed namespace so that ids derived from other ids (a retried command's
# events, for example) come out the same on every replica and every retry.
_DERIVED_NS = uuid.UUID("6f1d3c2e-8a4b-4f0e-9c1d-2b7e5a9f0c31")


class InvalidId(ValueError):
    """An id that is not `<prefix>-<uuid>` with the expected prefix."""


def new_id(prefix: IdPrefix) -> str:
    return f"{prefix}-{uuid.uuid4()}"


def derived_id(prefix: IdPrefix, *parts: str) -> str:
    """A deterministic id from other values: the same parts give the same id."""
    return f"{prefix}-{uuid.uuid5(_DERIVED_NS, '/'.join(parts))}"


def parse_id(value: str, prefix: IdPrefix) -> str:
    match = _ID_RE.fullmatch(value)
    if match is None or match.group("prefix") != prefix:
        raise InvalidId(f"'{value}' is not a valid {prefix} id (expected '{prefix}-<uuid4>')")
    return value


def is_id(value: str, prefix: IdPrefix) -> bool:
    try:
        parse_id(value, prefix)
    except InvalidId:
        return False
    return True
