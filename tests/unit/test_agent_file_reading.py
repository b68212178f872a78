"""Reading an uploaded agent file: the size limit, the JSON, Letta's legacy format, values O
cannot store and wrong shapes each give their own 4xx; a good file reads whole."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi import HTTPException

from o_gateway.agent_files.reading import MAX_SHOWN_ERRORS, read_agent_file
from o_gateway.agent_files.references import check_references

LIMIT = 1 << 20


def document(**agent: Any) -> dict[str, Any]:
    return {
        "agents": [
            {
                "id": "agent-0",
                "name": "a",
                "agent_type": "letta_v1_agent",
                "block_ids": ["block-0"],
                "tool_ids": [],
                "messages": [],
                "in_context_message_ids": [],
                **agent,
            }
        ],
        "blocks": [{"id": "block-0", "label": "human", "value": "Ada"}],
        "tools": [],
        "groups": [],
    }


def refused(data: bytes, limit: int = LIMIT) -> HTTPException:
    with pytest.raises(HTTPException) as caught:
        read_agent_file(data, limit)
    return caught.value


def test_a_good_file_reads_with_its_agents_and_blocks() -> None:
    file = read_agent_file(json.dumps(document()).encode(), LIMIT)
    assert [a.id for a in file.agents] == ["agent-0"]
    assert [(b.id, b.label, b.value) for b in file.blocks] == [("block-0", "human", "Ada")]


def test_a_file_that_is_a_json_string_holding_json_is_read_once_more() -> None:
    wrapped = json.dumps(json.dumps(document())).encode()
    assert [a.name for a in read_agent_file(wrapped, LIMIT).agents] == ["a"]


def test_a_file_over_the_limit_is_413_before_it_is_parsed() -> None:
    error = refused(b"x" * 101, limit=100)
    assert error.status_code == 413
    assert error.detail == "the agent file is over the limit of 100 bytes"


@pytest.mark.parametrize("data", [b"{not json", b"\xff\xfe", b"[" * 100_000])
def test_bytes_that_are_not_json_are_a_corrupted_file(data: bytes) -> None:
    error = refused(data)
    assert (error.status_code, error.detail) == (400, "Corrupted agent file format.")


def test_the_legacy_single_agent_format_is_refused_as_letta_refuses_it() -> None:
    error = refused(json.dumps({"name": "old", "tools": []}).encode())
    assert error.status_code == 400
    assert str(error.detail).startswith("Legacy AgentSchema format is deprecated.")


def test_a_nul_in_a_value_is_422_naming_where() -> None:
    bad = document()
    bad["blocks"][0]["value"] = "a\x00b"
    error = refused(json.dumps(bad).encode())
    assert error.status_code == 422
    assert "file.blocks[0].value" in str(error.detail) and "NUL" in str(error.detail)


def test_wrong_shapes_are_422_with_at_most_the_first_errors() -> None:
    bad = document()
    bad["blocks"] = [{"id": f"block-{i}", "label": 5} for i in range(MAX_SHOWN_ERRORS + 5)]
    error = refused(json.dumps(bad).encode())
    assert error.status_code == 422
    shown = error.detail
    assert isinstance(shown, list) and len(shown) == MAX_SHOWN_ERRORS + 1
    assert shown[0]["loc"] == ["file", "blocks", 0, "label"]
    assert shown[-1] == {"msg": "and 5 more", "loc": ["file"]}


def test_references_that_lead_nowhere_or_repeat_are_named() -> None:
    file = read_agent_file(json.dumps(document(block_ids=["block-9"])).encode(), LIMIT)
    with pytest.raises(HTTPException) as caught:
        check_references(file)
    assert caught.value.status_code == 422
    assert "block 'block-9'" in str(caught.value.detail)
    twice = document()
    twice["blocks"].append({"id": "block-0", "label": "persona", "value": ""})
    file = read_agent_file(json.dumps(twice).encode(), LIMIT)
    with pytest.raises(HTTPException) as caught:
        check_references(file)
    assert "block-0" in str(caught.value.detail)
