"""The hash chain of evolution decisions (o_evolution/chain.py): intact, edited, cut."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from typing import Any

from o_evolution.chain import GENESIS, BrokenLink, Link, canonical, link_hash, verify


def build(payloads: list[dict[str, Any]]) -> list[Link]:
    links, prev = [], GENESIS
    for seq, payload in enumerate(payloads, start=1):
        h = link_hash(prev, payload)
        links.append(Link(seq, prev, h, payload, f"Decision{seq}"))
        prev = h
    return links


PAYLOADS = [
    {"agent_id": "agent-1", "decision": "proposed", "patch": "raise temperature", "n": i}
    for i in range(1, 6)
]


def test_an_intact_chain_of_5_verifies() -> None:
    chain = build(PAYLOADS)
    assert verify(chain) is None
    assert chain[0].prev_hash == GENESIS
    assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(chain))


def test_an_empty_chain_verifies() -> None:
    assert verify([]) is None


def test_one_character_changed_in_link_3_is_named_by_its_content() -> None:
    chain = build(PAYLOADS)
    edited = {**chain[2].payload, "patch": "raise temperaturf"}
    chain[2] = dataclasses.replace(chain[2], payload=edited)
    assert verify(chain) == BrokenLink(3, "Decision3", "hash does not match its content")


def test_an_altered_prev_hash_is_named() -> None:
    chain = build(PAYLOADS)
    chain[3] = dataclasses.replace(chain[3], prev_hash="f" * 64)
    assert verify(chain) == BrokenLink(4, "Decision4", "prev_hash does not match the hash of seq 3")


def test_a_rehashed_edit_breaks_the_next_link() -> None:
    # Rewriting link 3 and recomputing its own hash still leaves link 4 pointing at the old one.
    chain = build(PAYLOADS)
    edited = {**chain[2].payload, "decision": "aborted"}
    rehashed = link_hash(chain[2].prev_hash, edited)
    chain[2] = dataclasses.replace(chain[2], payload=edited, hash=rehashed)
    assert verify(chain) == BrokenLink(4, "Decision4", "prev_hash does not match the hash of seq 3")


def test_a_deleted_link_names_the_one_after_it() -> None:
    chain = build(PAYLOADS)
    del chain[2]
    assert verify(chain) == BrokenLink(4, "Decision4", "prev_hash does not match the hash of seq 2")


def test_a_first_link_not_on_genesis_is_named() -> None:
    chain = build(PAYLOADS)
    assert verify(chain[1:]) == BrokenLink(2, "Decision2", "prev_hash is not the genesis hash")


def test_key_order_does_not_change_the_hash() -> None:
    forward = {"a": 1, "b": {"x": [1, 2], "y": "é"}, "c": None}
    backward = {"c": None, "b": {"y": "é", "x": [1, 2]}, "a": 1}
    assert canonical(forward) == canonical(backward)
    assert link_hash(GENESIS, forward) == link_hash(GENESIS, backward)


def test_canonical_is_compact_sorted_utf8_json() -> None:
    assert canonical({"b": "é", "a": 1}) == '{"a":1,"b":"é"}'.encode()


def test_the_hash_is_sha256_of_prev_newline_payload() -> None:
    payload = {"decision": "promoted"}
    expected = hashlib.sha256(GENESIS.encode() + b'\n{"decision":"promoted"}').hexdigest()
    assert link_hash(GENESIS, payload) == expected


def test_a_rollback_recorded_before_its_edits_were_kept_hashes_as_it_did() -> None:
    """`made` and `taken_back` came later: absent, they are out of the payload, so the
    hash of a rollback recorded before them is the one it was given then."""
    from o_contracts.events import VersionRolledBack
    from o_contracts.evolution import VersionSpec

    old = {
        "agent_id": "agent-1",
        "version_id": "version-2",
        "spec": VersionSpec(system="s").model_dump(mode="json"),
        "previous_version": "version-1",
    }
    decoded = VersionRolledBack.model_validate(old).chained(GENESIS, link_hash)
    assert "made" not in decoded.chain_payload()
    stored = link_hash(GENESIS, {"type": "VersionRolledBack", **old, **_defaults()})
    assert decoded.hash == stored
    kept = VersionRolledBack.model_validate({**old, "made": {}, "taken_back": {}})
    assert kept.chain_payload()["made"] == {}


def _defaults() -> dict[str, Any]:
    """The fields a rollback had before, at their defaults."""
    return {"prev_hash": GENESIS, "requested_by": "operator", "reason": ""}
