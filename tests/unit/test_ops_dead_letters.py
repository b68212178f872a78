"""Dead letters as `o_ops dead-letters` reads them, and which may be redriven (no servers)."""

from __future__ import annotations

from datetime import UTC, datetime

import msgpack
import pytest

from o_ops.dead_letter_records import (
    NotRedrivable,
    read,
    redrive_msg_id,
    redrive_target,
    shown_body,
)

AT = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
ENVELOPE = msgpack.packb(
    {"id": "cmd-1", "type": "StartRun", "aggregate_id": "agent-9", "data": {"x": b"\x00\x01"}}
)


def headers(origin: str, consumer: str = "executor") -> dict[str, str]:
    return {
        "O-Reason": "failed 5 times: ValueError('x')",
        "O-Consumer": consumer,
        "O-Origin-Subject": origin,
        "O-Origin-Seq": "41",
    }


def test_a_dead_letter_reads_its_origin_reason_and_what_the_body_says_it_is() -> None:
    letter = read(7, "o.dlq.executor", ENVELOPE, headers("o.cmd.executor.agent-9"), AT)
    assert letter.summary() == {
        "id": 7,
        "time": "2026-11-24T12:00:00+00:00",
        "consumer": "executor",
        "reason": "failed 5 times: ValueError('x')",
        "origin_subject": "o.cmd.executor.agent-9",
        "origin_seq": 41,
        "type": "StartRun",
        "envelope_id": "cmd-1",
        "aggregate_id": "agent-9",
        "size": len(ENVELOPE),
        "redrivable": True,
    }


def test_a_body_that_is_not_messagepack_still_reads() -> None:
    letter = read(3, "o.dlq.memory", b"\xc1garbage", None, None)
    assert (letter.consumer, letter.type, letter.origin_seq, letter.is_command) == (
        "memory",
        None,
        None,
        False,
    )
    assert shown_body(b"\xc1garbage") == {"undecodable": "wWdhcmJhZ2U="}
    assert shown_body(ENVELOPE)["data"] == {"x": {"base64": "AAE="}}


def test_a_command_goes_back_to_the_subject_it_was_sent_on() -> None:
    letter = read(7, "o.dlq.executor", ENVELOPE, headers("o.cmd.executor.agent-9"), AT)
    assert redrive_target(letter) == "o.cmd.executor.agent-9"


def test_an_event_a_projection_gave_up_on_is_never_sent_again() -> None:
    letter = read(
        8, "o.dlq.projection-runs", ENVELOPE, headers("o.evt.agent.a", "projection-runs"), AT
    )
    with pytest.raises(NotRedrivable) as refused:
        redrive_target(letter)
    assert "in the log already" in str(refused.value)
    assert "python -m o_ops projections rebuild runs" in str(refused.value)


def test_every_redrive_of_one_dead_letter_is_one_message_apart_from_the_original() -> None:
    letter = read(7, "o.dlq.executor", ENVELOPE, headers("o.cmd.executor.agent-9"), AT)
    assert redrive_msg_id(letter) == "redrive-O_DEAD_LETTERS-7"
    assert redrive_msg_id(letter) != letter.envelope_id
