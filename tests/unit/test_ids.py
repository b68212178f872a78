"""Resource ids: `<prefix>-<uuid4>`, safe to put in NATS subjects."""

from __future__ import annotations

import re
import uuid

import pytest

from o_contracts.ids import InvalidId, derived_id, is_id, new_id, parse_id

UUID_RE = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


@pytest.mark.parametrize("prefix", ["agent", "block", "tool", "message", "run", "evt", "cmd"])
def test_new_id_is_prefix_dash_uuid4(prefix: str) -> None:
    value = new_id(prefix)  # type: ignore[arg-type]
    assert re.fullmatch(rf"{prefix}-{UUID_RE}", value)
    assert uuid.UUID(value[len(prefix) + 1 :]).version == 4


def test_new_id_is_unique() -> None:
    assert len({new_id("agent") for _ in range(100)}) == 100


def test_derived_id_is_deterministic_and_prefixed() -> None:
    a = derived_id("evt", "cmd-1", "step", "2")
    b = derived_id("evt", "cmd-1", "step", "2")
    assert a == b
    assert re.fullmatch(rf"evt-{UUID_RE}", a)
    assert uuid.UUID(a[4:]).version == 5


def test_derived_id_differs_with_parts_and_prefix() -> None:
    base = derived_id("evt", "x")
    assert derived_id("evt", "y") != base
    assert derived_id("evt", "x", "y") != base
    # Only the prefix differs when the parts are the same.
    assert derived_id("cmd", "x") == "cmd-" + base[len("evt-") :]


def test_derived_id_is_stable_across_processes() -> None:
    # A fixed namespace: the value must never change between releases, or
    # retried commands would stop deduplicating.
    ns = uuid.UUID("6f1d3c2e-8a4b-4f0e-9c1d-2b7e5a9f0c31")
    assert derived_id("evt", "a", "b") == f"evt-{uuid.uuid5(ns, 'a/b')}"


def test_derived_id_passes_parse_id() -> None:
    value = derived_id("block", "agent-1", "human")
    assert parse_id(value, "block") == value


def test_parse_id_accepts_valid() -> None:
    value = new_id("agent")
    assert parse_id(value, "agent") == value
    assert is_id(value, "agent") is True


def test_parse_id_rejects_wrong_prefix_with_helpful_message() -> None:
    value = new_id("block")
    with pytest.raises(InvalidId) as exc:
        parse_id(value, "agent")
    assert str(exc.value) == f"'{value}' is not a valid agent id (expected 'agent-<uuid4>')"
    assert is_id(value, "agent") is False


GOOD_UUID = "123e4567-e89b-42d3-a456-426614174000"


@pytest.mark.parametrize(
    "value",
    [
        "",
        "agent",
        "agent-",
        GOOD_UUID,
        f"agent_{GOOD_UUID}",
        f"agent-{GOOD_UUID.upper()}",
        f"agent-{GOOD_UUID[:-1]}",
        f"agent-{GOOD_UUID}0",
        f"agent-{GOOD_UUID.replace('-', '')}",
        f" agent-{GOOD_UUID}",
        f"agent-{GOOD_UUID} ",
        f"xagent-{GOOD_UUID}",
        f"Agent-{GOOD_UUID}",
    ],
)
def test_parse_id_rejects_malformed(value: str) -> None:
    with pytest.raises(InvalidId):
        parse_id(value, "agent")
    assert is_id(value, "agent") is False


@pytest.mark.parametrize("bad", [".", "*", ">"])
@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_parse_id_rejects_nats_subject_tokens(bad: str, where: str) -> None:
    value = f"agent-{GOOD_UUID}"
    if where == "start":
        value = bad + value
    elif where == "middle":
        value = value.replace("-", bad, 1)
    else:
        value = value + bad
    with pytest.raises(InvalidId):
        parse_id(value, "agent")


def test_parse_id_rejects_wildcard_ids() -> None:
    for value in ["agent-*", "agent->", "agent.1", "*", ">"]:
        with pytest.raises(InvalidId):
            parse_id(value, "agent")


def test_parse_id_rejects_trailing_newline() -> None:
    with pytest.raises(InvalidId):
        parse_id(f"agent-{GOOD_UUID}\n", "agent")
