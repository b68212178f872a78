"""The shadow's fold of a conversation (o_executor/shadow/snapshot.py: ConversationFold)
holds the messages in context only: a message that leaves never comes back, and only its
id and position are kept (what an evaluation holds of a long-lived agent grows with its
context, not its history)."""

from __future__ import annotations

from o_contracts.events import ContextSummarized, MessagesReset, RunRolledBack, RunStarted
from o_contracts.models import ChatMessage
from o_executor.shadow.snapshot import ConversationFold

AGENT = "agent-1"


def said(message_id: str) -> ChatMessage:
    return ChatMessage(id=message_id, role="user", content=message_id)


def started(run_id: str, *message_ids: str) -> RunStarted:
    return RunStarted(
        run_id=run_id, agent_id=AGENT, messages=[said(i) for i in message_ids], max_steps=5
    )


def summarized(first_kept: str | None, summary: str) -> ContextSummarized:
    return ContextSummarized(
        run_id="run-s",
        agent_id=AGENT,
        step_number=0,
        summary=said(summary),
        first_kept_message_id=first_kept,
        messages_before=0,
        messages_after=0,
    )


def test_messages_that_leave_the_context_are_not_held_but_their_place_is_kept() -> None:
    fold = ConversationFold()
    fold.apply(10, started("run-1", "m1", "m2"))
    fold.apply(11, started("run-2", "m3"))
    fold.apply(12, started("run-3", "m4"))
    fold.apply(13, RunRolledBack(run_id="run-2", agent_id=AGENT, by_run_id="run-3"))
    # Summarized before m3, which had already left (rolled back): what came before its
    # place leaves, m4 after it stays, the summary goes in at its place.
    fold.apply(14, summarized("m3", "s1"))

    assert [m.id for m in fold.history()] == ["s1", "m4"]
    assert set(fold.messages) == {"s1", "m4"}
    assert set(fold.seen) == {"m1", "m2", "m3", "m4", "s1"}
    # A message seen before is not added again, even though it left.
    fold.apply(15, started("run-4", "m1", "m5"))
    assert [m.id for m in fold.history()] == ["s1", "m4", "m5"]


def test_a_reset_leaves_nothing_held_and_a_fork_inherits_only_the_context() -> None:
    fold = ConversationFold()
    fold.apply(10, started("run-1", "m1"))
    fold.apply(11, MessagesReset(agent_id=AGENT))
    fold.apply(12, started("run-2", "m2"))
    assert list(fold.messages) == ["m2"]

    fork = ConversationFold()
    fork.inherit(fold)
    fork.apply(13, started("run-3", "m3"))
    assert [m.id for m in fork.history()] == ["m2", "m3"]
    # The copy a snapshot takes does not move with the fold.
    copy = fold.copy()
    fold.apply(14, started("run-4", "m4"))
    assert [m.id for m in copy.history()] == ["m2"]
