"""What a dead holder's entry gives back (o_runtime/holdings.py): its messages' ack subjects,
all but those another holder has a later delivery of (a nak names only the stream sequence,
so it would take the message from that holder)."""

from __future__ import annotations

import pytest

from o_runtime.holdings import Held, ack_position, to_give_back


def ack(seq: int, delivered: int, consumer: str = "executor") -> str:
    return f"$JS.ACK.O_COMMANDS.{consumer}.{delivered}.{seq}.{seq + 100}.1764000000000000000.0"


def test_an_ack_subject_names_the_stream_sequence_and_the_delivery() -> None:
    assert ack_position(ack(42, 3)) == (42, 3)
    # With a domain and an account hash (nats-server 2.10+ may send this form).
    v2 = "$JS.ACK.hub.ACCHASH.O_COMMANDS.executor.2.77.9.1764000000000000000.0.r4nd"
    assert ack_position(v2) == (77, 2)
    assert ack_position("_INBOX.executor.abc") is None
    assert ack_position("$JS.ACK.O_COMMANDS.executor.x.42.1.2.0") is None


def test_a_dead_holders_messages_are_all_given_back_when_no_one_else_holds_them() -> None:
    dead = Held("o.rpc.alive.executor.1-a", (ack(5, 1), ack(9, 2)))
    live = Held("o.rpc.alive.executor.2-b", (ack(7, 1),))
    assert to_give_back(dead, [live]) == [ack(5, 1), ack(9, 2)]


def test_a_message_another_holder_has_a_later_delivery_of_is_left_to_it() -> None:
    # The dead one nakked seq 9 itself before it died (its entry not yet rewritten), and
    # the message went on to the live holder.
    dead = Held("o.rpc.alive.executor.1-a", (ack(5, 1), ack(9, 1)))
    live = Held("o.rpc.alive.executor.2-b", (ack(9, 2),))
    assert to_give_back(dead, [live]) == [ack(5, 1)]


def test_the_same_delivery_listed_twice_is_not_nakked_from_under_its_other_holder() -> None:
    dead = Held("o.rpc.alive.executor.1-a", (ack(9, 2),))
    also = Held("o.rpc.alive.executor.2-b", (ack(9, 2),))
    assert to_give_back(dead, [also]) == []


def test_an_older_delivery_held_elsewhere_does_not_keep_a_newer_one_back() -> None:
    dead = Held("o.rpc.alive.executor.1-a", (ack(9, 3),))
    stale = Held("o.rpc.alive.executor.2-b", (ack(9, 2),))
    assert to_give_back(dead, [stale]) == [ack(9, 3)]


def test_an_entry_reads_back_as_written_and_anything_else_is_refused() -> None:
    held = Held("o.rpc.alive.memory.3-c", (ack(1, 1, "memory"), ack(2, 4, "memory")))
    assert Held.decode(held.encode()) == held
    for junk in (b"", b"\x01", b"\x81\xa5alive\x01"):
        with pytest.raises(ValueError):
            Held.decode(junk)
