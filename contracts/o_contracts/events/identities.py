"""Identities: the people and organisations an application's agents serve (Letta's
identities, deprecated there in 0.16 but still sent by its clients: `identity_ids` on
agents, the `identifier_keys` filter).

An identity is its own aggregate (`o.evt.identity.<identity_id>`), decided by the gateway.
Its links to agents and blocks are part of it, as whole sets: attaching an identity to an
agent (from the identity's routes or the agent's) is one `IdentityUpdated` of the identity.
An agent or block deleted stays in the sets until the identity is next changed; reads join
the live agents and blocks, so it is not shown.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from o_contracts.base import Event


class IdentityCreated(Event):
    identity_id: str
    identifier_key: str
    name: str
    # "org", "user" or "other".
    identity_type: str
    project_id: str | None = None
    # Letta's IdentityProperty objects: {"key", "value", "type"}.
    properties: list[dict[str, Any]] = Field(default_factory=list)
    agent_ids: list[str] = Field(default_factory=list)
    block_ids: list[str] = Field(default_factory=list)


class IdentityUpdated(Event):
    """Only the fields present in `changes` changed (IdentityCreated's names; `properties`,
    `agent_ids` and `block_ids` are the whole new lists)."""

    identity_id: str
    changes: dict[str, Any]


class IdentityDeleted(Event):
    identity_id: str
