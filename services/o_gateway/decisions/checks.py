"""Checks of what a client gives an agent, and the refusal every agent decision raises."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from o_contracts.memory_stream import InvalidStreamSettings, StreamSettings
from o_contracts.tool_rules import InvalidToolRule, validate_rules
from o_runtime.eventlog import AppendRejected


class Refused(AppendRejected):
    """A decision's "no", with the HTTP status and the detail the client sees.

    An AppendRejected: the log's append_decided lets it through, and the app
    answers it as {"detail": reason} with its status, as it does an HTTPException.
    """


def checked_rules(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    try:
        validate_rules(rules)
    except InvalidToolRule as exc:
        raise Refused(str(exc), 422) from exc
    return rules


def checked_metadata(metadata: dict[str, Any] | None) -> dict[str, Any]:
    """Metadata as given; its memory-stream settings (archival ranking) must be valid."""
    try:
        StreamSettings.from_metadata(metadata)
    except InvalidStreamSettings as exc:
        raise Refused(str(exc), 400) from exc
    return metadata or {}


def check_unique_names(builtins: Sequence[str], user_names: Sequence[str]) -> None:
    # The model calls tools by name: two tools of one agent cannot share one.
    seen = set(builtins)
    for name in user_names:
        if name in seen:
            raise Refused(f"the agent already has a tool named '{name}'", 409)
        seen.add(name)
