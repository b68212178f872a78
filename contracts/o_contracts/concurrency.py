"""What happens to a message that arrives while a run of its conversation is in flight.

A request may name a policy (`concurrency` in the body of a message send); an
agent may keep a default (`concurrency` on create or PATCH); without either,
the route decides as Letta does: its conversation routes refuse a second
message (409, Letta's conversation-busy error), its agent-level routes take it
(Letta runs it alongside, O queues it behind). docs/conversations.md explains
each policy.
"""

from __future__ import annotations

from typing import Literal, get_args

Concurrency = Literal["reject", "enqueue", "interrupt", "rollback", "steer"]
POLICIES: tuple[Concurrency, ...] = get_args(Concurrency)

# Letta's behaviour per route family, when neither the request nor the agent says.
CONVERSATION_ROUTES: Concurrency = "reject"
AGENT_ROUTES: Concurrency = "enqueue"


def policy_for(
    requested: Concurrency | None, agent_default: str | None, route_default: Concurrency
) -> Concurrency:
    """The request's own policy, else the agent's default, else the route's."""
    if requested is not None:
        return requested
    for policy in POLICIES:
        if agent_default == policy:
            return policy
    return route_default
