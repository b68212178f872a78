"""nats-server's `authorization` block for O's identities: public keys and permissions.

Server-configured NKEY users rather than decentralized JWT accounts (docs/security.md says
why): the file holds no secret (public keys only), so it can live in a ConfigMap, and a
change is applied by a configuration reload (SIGHUP) without dropping anyone who stays
allowed. Every user is in the one global account, so JetStream is shared as before.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from o_setup.credentials import User
from o_setup.roles import Grant


def _list(items: Iterable[str]) -> str:
    # JSON strings are valid in nats-server's configuration syntax; `$` needs no escape
    # inside quotes.
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def permissions(grant: Grant) -> str:
    # A user may only do what its grant lists; nothing listed is nothing allowed.
    def rule(allowed: tuple[str, ...]) -> str:
        return f"{{ allow: {_list(allowed)} }}" if allowed else '{ deny: [">"] }'

    parts = [f"publish: {rule(grant.publish)}", f"subscribe: {rule(grant.subscribe)}"]
    if grant.responds_within:
        # (an answer later than nats-server's default two minutes is refused: say how long)
        parts.append(
            f'allow_responses: {{ max: {grant.responds}, expires: "{grant.responds_within:.0f}s" }}'
        )
    elif grant.responds == 1:
        parts.append("allow_responses: true")
    elif grant.responds > 1:
        parts.append(f"allow_responses: {{ max: {grant.responds} }}")
    return "{ " + ", ".join(parts) + " }"


def authorization(users: Iterable[User]) -> str:
    """The block to include in nats-server's configuration (no anonymous users)."""
    lines = ["authorization {", "  users = ["]
    for user in users:
        lines.append(f"    # {user.role.name}: {user.role.about}")
        lines.append(
            f"    {{ nkey: {json.dumps(user.public_key)}, "
            f"permissions: {permissions(user.role.grant)} }}"
        )
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"
