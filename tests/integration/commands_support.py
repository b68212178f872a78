"""A command to send in the command-consumer tests (test_command_replies.py, test_takeover.py)."""

from __future__ import annotations

from o_contracts.commands import StartRun
from o_contracts.envelope import Envelope
from o_contracts.ids import new_id
from o_contracts.models import ChatMessage


def command(agent_id: str | None = None) -> Envelope[StartRun]:
    """A StartRun of `agent_id`, or of a fresh agent (its own subject, so tests never meet)."""
    agent_id = agent_id or new_id("agent")
    return Envelope.wrap(
        StartRun(
            run_id=new_id("run"),
            agent_id=agent_id,
            messages=[ChatMessage(id=new_id("message"), role="user", content="hi")],
        ),
        aggregate_id=agent_id,
        producer="test",
    )
