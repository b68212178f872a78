"""The MessagePack envelope: round trip, causation, rejection of bad bytes, upcasting."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any, ClassVar

import msgpack
import pytest

from o_contracts.base import Event, Message
from o_contracts.envelope import Envelope, MalformedMessage, decode, wire_dict
from o_contracts.events import BlockUpdated
from o_contracts.registry import all_messages, lookup

TIME = datetime(2025, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)


class OTestUpcastRenamedField(Event):
    """Test-only event at schema v2: v1 called `text` what v2 calls `content`."""

    schema_version: ClassVar[int] = 2

    block_id: str
    content: str

    @classmethod
    def upcast(cls, version: int, data: dict[str, Any]) -> dict[str, Any]:
        if version == 1:
            data = dict(data)
            data["content"] = data.pop("text")
        return data


def _block_updated() -> BlockUpdated:
    return BlockUpdated(
        block_id="block-1",
        version=3,
        changes={"value": "hello", "limit": 100},
        actor="agent",
        agent_id="agent-1",
        tool_name="memory_replace",
    )


def _body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "evt-1",
        "type": "BlockUpdated",
        "v": 2,
        "aggregate_id": "block-1",
        "causation_id": None,
        "correlation_id": None,
        "time": TIME.isoformat(),
        "producer": "test",
        "data": _block_updated().model_dump(mode="json"),
    }
    body.update(overrides)
    return body


def _pack(body: Any) -> bytes:
    packed: bytes = msgpack.packb(body, use_bin_type=True)
    return packed


def _malformed(raw: bytes) -> str:
    with pytest.raises(MalformedMessage) as exc:
        decode(raw)
    return str(exc.value)


# -- wrap / round trip -----------------------------------------------------


def test_wrap_fills_type_version_id_and_time() -> None:
    before = datetime.now(UTC)
    env = Envelope.wrap(_block_updated(), aggregate_id="block-1", producer="o-memory")
    assert env.type == "BlockUpdated"
    assert env.schema_version == 2
    assert env.id.startswith("evt-")
    assert env.causation_id is None
    assert env.correlation_id is None
    assert env.time.tzinfo is not None
    assert before <= env.time <= datetime.now(UTC)


def test_round_trip_keeps_every_field() -> None:
    data = _block_updated()
    env = Envelope.wrap(
        data,
        aggregate_id="block-1",
        producer="o-memory",
        id="evt-abc",
        causation_id="cmd-xyz",
        correlation_id="cmd-root",
        time=TIME,
    )
    out = decode(env.encode())
    assert out.id == "evt-abc"
    assert out.type == "BlockUpdated"
    assert out.schema_version == 2
    assert out.aggregate_id == "block-1"
    assert out.causation_id == "cmd-xyz"
    assert out.correlation_id == "cmd-root"
    assert out.time == TIME
    assert out.time.utcoffset() == timedelta(0)
    assert out.producer == "o-memory"
    assert type(out.data) is BlockUpdated
    assert out.data == data
    assert wire_dict(out) == wire_dict(env)
    assert out.encode() == env.encode()


def test_round_trip_keeps_non_utc_offset() -> None:
    t = datetime(2025, 1, 1, 12, 0, tzinfo=timezone(timedelta(hours=-5)))
    env = Envelope.wrap(_block_updated(), aggregate_id="a", producer="p", time=t)
    out = decode(env.encode())
    assert out.time == t
    assert out.time.utcoffset() == timedelta(hours=-5)


def test_encode_wire_keys() -> None:
    env = Envelope.wrap(
        _block_updated(), aggregate_id="block-1", producer="p", id="evt-1", time=TIME
    )
    assert wire_dict(env) == {
        "id": "evt-1",
        "type": "BlockUpdated",
        "v": 2,
        "aggregate_id": "block-1",
        "causation_id": None,
        "correlation_id": None,
        "time": "2025-03-04T05:06:07.891011+00:00",
        "producer": "p",
        "data": {
            "block_id": "block-1",
            "version": 3,
            "changes": {"value": "hello", "limit": 100},
            "value_edit": None,
            "actor": "agent",
            "agent_id": "agent-1",
            "tool_name": "memory_replace",
            "restored_from": None,
        },
    }


def test_decode_accepts_body_without_optional_ids() -> None:
    body = _body()
    del body["causation_id"]
    del body["correlation_id"]
    out = decode(_pack(body))
    assert out.causation_id is None
    assert out.correlation_id is None
    assert out.data == _block_updated()


# -- caused ----------------------------------------------------------------


def test_caused_from_root_uses_root_id_as_correlation() -> None:
    root = Envelope.wrap(_block_updated(), aggregate_id="block-1", producer="gw", id="cmd-root")
    child = root.caused(_block_updated(), aggregate_id="block-2", producer="mem", id="evt-c")
    assert child.id == "evt-c"
    assert child.causation_id == "cmd-root"
    assert child.correlation_id == "cmd-root"
    assert child.aggregate_id == "block-2"
    assert child.producer == "mem"
    assert child.type == "BlockUpdated"


def test_caused_keeps_existing_correlation_through_a_chain() -> None:
    root = Envelope.wrap(
        _block_updated(), aggregate_id="a", producer="gw", id="cmd-1", correlation_id="corr-0"
    )
    child = root.caused(_block_updated(), aggregate_id="a", producer="p", id="evt-2")
    grandchild = child.caused(_block_updated(), aggregate_id="a", producer="p", id="evt-3")
    assert (child.causation_id, child.correlation_id) == ("cmd-1", "corr-0")
    assert (grandchild.causation_id, grandchild.correlation_id) == ("evt-2", "corr-0")


def test_caused_survives_round_trip() -> None:
    root = Envelope.wrap(_block_updated(), aggregate_id="a", producer="gw", id="cmd-1")
    child = root.caused(_block_updated(), aggregate_id="a", producer="p")
    out = decode(child.encode())
    assert out.causation_id == "cmd-1"
    assert out.correlation_id == "cmd-1"
    assert out.id == child.id
    assert out.id.startswith("evt-")


# -- rejection -------------------------------------------------------------


def test_decode_rejects_non_msgpack() -> None:
    # 0xc1 is the one byte MessagePack never uses.
    assert _malformed(b"\xc1").startswith("not MessagePack: ")


def test_decode_rejects_truncated_msgpack() -> None:
    raw = _pack(_body())
    assert _malformed(raw[:-3]).startswith("not MessagePack: ")


def test_decode_rejects_trailing_garbage() -> None:
    assert _malformed(_pack(_body()) + b"\x01").startswith("not MessagePack: ")


@pytest.mark.parametrize("value", [[1, 2], "a string", 42, None])
def test_decode_rejects_non_map(value: Any) -> None:
    assert _malformed(_pack(value)) == "envelope is not a map"


def test_decode_rejects_missing_fields_naming_them() -> None:
    body = _body()
    del body["id"]
    del body["producer"]
    assert _malformed(_pack(body)) == "envelope lacks id, producer"


@pytest.mark.parametrize("field", ["id", "type", "v", "aggregate_id", "time", "producer", "data"])
def test_decode_rejects_each_missing_field(field: str) -> None:
    body = _body()
    del body[field]
    assert _malformed(_pack(body)) == f"envelope lacks {field}"


def test_decode_rejects_unknown_type() -> None:
    assert _malformed(_pack(_body(type="NoSuchEvent"))) == "unknown message type 'NoSuchEvent'"


def test_decode_rejects_abstract_base_type() -> None:
    assert _malformed(_pack(_body(type="Event"))) == "unknown message type 'Event'"


def test_decode_rejects_newer_schema_version() -> None:
    assert _malformed(_pack(_body(v=3))) == (
        "BlockUpdated schema version 3 is not readable (this build reads 1..2)"
    )


@pytest.mark.parametrize("v", [0, -1, "1", 1.0])
def test_decode_rejects_bad_schema_version(v: Any) -> None:
    assert _malformed(_pack(_body(v=v))) == (
        f"BlockUpdated schema version {v!r} is not readable (this build reads 1..2)"
    )


def test_decode_rejects_non_map_payload() -> None:
    assert _malformed(_pack(_body(data=["x"]))) == "payload is not a map"


def test_decode_rejects_invalid_payload_naming_the_field() -> None:
    data = _block_updated().model_dump(mode="json")
    data["version"] = "three"
    msg = _malformed(_pack(_body(data=data)))
    assert msg.startswith("invalid BlockUpdated: version: ")
    assert "integer" in msg


def test_decode_rejects_missing_payload_field() -> None:
    data = _block_updated().model_dump(mode="json")
    del data["block_id"]
    assert _malformed(_pack(_body(data=data))) == "invalid BlockUpdated: block_id: Field required"


def test_decode_rejects_extra_payload_field() -> None:
    data = _block_updated().model_dump(mode="json") | {"bogus": 1}
    assert _malformed(_pack(_body(data=data))) == (
        "invalid BlockUpdated: bogus: Extra inputs are not permitted"
    )


def test_decode_rejects_bad_literal_naming_the_field() -> None:
    data = _block_updated().model_dump(mode="json") | {"actor": "robot"}
    assert _malformed(_pack(_body(data=data))).startswith("invalid BlockUpdated: actor: ")


def test_decode_rejects_bad_envelope_time() -> None:
    msg = _malformed(_pack(_body(time="yesterday")))
    assert msg.startswith("invalid BlockUpdated: time: ")


def test_malformed_message_is_a_value_error() -> None:
    assert issubclass(MalformedMessage, ValueError)


# -- registry and upcasting -----------------------------------------------


def test_subclass_registers_by_class_name() -> None:
    assert lookup("OTestUpcastRenamedField") is OTestUpcastRenamedField
    assert OTestUpcastRenamedField in all_messages()
    assert lookup("BlockUpdated") is BlockUpdated
    assert lookup("Event") is None
    assert lookup("Message") is None


def test_two_classes_with_one_name_are_refused() -> None:
    with pytest.raises(RuntimeError, match="two message classes are named OTestUpcastRenamedField"):
        type(
            "OTestUpcastRenamedField",
            (Event,),
            {"__module__": __name__, "__annotations__": {"x": "int"}},
        )


def test_base_upcast_is_identity() -> None:
    data = {"a": 1}
    assert Message.upcast(1, data) is data


def test_decode_upcasts_v1_payload() -> None:
    raw = _pack(
        _body(
            type="OTestUpcastRenamedField",
            v=1,
            aggregate_id="block-9",
            data={"block_id": "block-9", "text": "old shape"},
        )
    )
    out = decode(raw)
    assert type(out.data) is OTestUpcastRenamedField
    assert out.data == OTestUpcastRenamedField(block_id="block-9", content="old shape")
    assert out.schema_version == 2
    assert out.type == "OTestUpcastRenamedField"
    assert out.aggregate_id == "block-9"


def test_decode_does_not_upcast_current_version() -> None:
    raw = _pack(
        _body(
            type="OTestUpcastRenamedField",
            v=2,
            data={"block_id": "block-9", "content": "new shape"},
        )
    )
    out = decode(raw)
    assert out.data == OTestUpcastRenamedField(block_id="block-9", content="new shape")


def test_current_version_round_trip_of_test_event() -> None:
    env = Envelope.wrap(
        OTestUpcastRenamedField(block_id="b", content="c"), aggregate_id="b", producer="p"
    )
    assert env.schema_version == 2
    assert wire_dict(env)["v"] == 2
    assert decode(env.encode()).data == env.data


def test_upcast_result_is_still_validated() -> None:
    # A v1 payload written with the v2 name: the upcast moves nothing and
    # validation names the field the upcast should have produced.
    raw = _pack(
        _body(
            type="OTestUpcastRenamedField",
            v=1,
            data={"block_id": "b", "text": "x", "extra": 1},
        )
    )
    assert (
        _malformed(raw) == "invalid OTestUpcastRenamedField: extra: Extra inputs are not permitted"
    )


def test_decode_rejects_version_newer_than_test_event() -> None:
    raw = _pack(_body(type="OTestUpcastRenamedField", v=3, data={"block_id": "b", "content": "c"}))
    assert _malformed(raw) == (
        "OTestUpcastRenamedField schema version 3 is not readable (this build reads 1..2)"
    )


def test_the_committed_asyncapi_document_is_up_to_date() -> None:
    from pathlib import Path

    from o_contracts.asyncapi import render, uncovered

    # Test-only message types (this module defines one) are not contracts.
    missing = [name for name in uncovered() if not name.startswith("OTest")]
    assert missing == [], "every message type must be on a documented channel"
    committed = Path(__file__).parents[2] / "contracts" / "asyncapi.yaml"
    assert committed.read_text() == render(), "run `make asyncapi`"
