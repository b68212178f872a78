"""Group events: multi-agent groups and the sleep-time turns of their managers.

A group's registry events (created, updated, deleted) are appended by the
gateway on `o.evt.group.<group_id>`. A sleep-time group's turn events are
appended by the evolution service on the *manager agent's* subject
(`o.evt.agent.<agent_id>`), next to the run they count, so that one projection
(runs) sees the turn and the companion runs it starts in log order, and the
turn counter is decided with the expected sequence of that subject.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from o_contracts.base import Event

# Letta's manager types. voice_sleeptime and swarm are named by Letta's schema but
# not served by O (a request naming them is refused).
ManagerType = Literal["round_robin", "supervisor", "dynamic", "sleeptime"]
MANAGER_TYPES: tuple[str, ...] = ("round_robin", "supervisor", "dynamic", "sleeptime")


class GroupCreated(Event):
    group_id: str
    manager_type: ManagerType
    # The participants, in order (a sleep-time group: its companion agents).
    agent_ids: list[str]
    description: str = ""
    manager_agent_id: str | None = None
    # sleeptime: a companion run every this many turns of the manager (None: every turn).
    sleeptime_agent_frequency: int | None = None
    # round_robin and dynamic: at most this many turns per group message.
    max_turns: int | None = None
    # dynamic: the manager ends the group's turn with this text.
    termination_token: str | None = None
    hidden: bool | None = None
    # sleeptime: made by the gateway for an agent with enable_sleeptime (removed with it).
    managed: bool = False


class GroupUpdated(Event):
    """Only the fields present in `changes` changed (GroupCreated's field names)."""

    group_id: str
    changes: dict[str, Any]


class GroupDeleted(Event):
    group_id: str


class CompanionRun(BaseModel):
    """A run of a sleep-time companion, started by a counted turn.

    `sleeptime`: the companion reviews the manager's new messages with its memory
    tools. `reflection`: the memory service draws insights from the manager's
    archival memories that passed the importance threshold, as the companion's run
    (its cost counts against the sleep-time budget, never in the user's turn).
    """

    agent_id: str
    run_id: str
    purpose: Literal["sleeptime", "reflection"] = "sleeptime"

    def request_config(self, manager_run_id: str) -> dict[str, str]:
        """What the run records as its request (Letta's run_type for a review)."""
        run_type = (
            "sleeptime_reflection"
            if self.purpose == "reflection"
            else "sleeptime_agent_send_message_async"
        )
        return {"run_type": run_type, "manager_run_id": manager_run_id}


class SleeptimeTurnCounted(Event):
    """One run of a sleep-time group's manager agent, counted by the evolution service.

    Every `frequency`-th counted turn (the first one included) starts a
    background run of each companion on the manager's messages after
    `after_message_id` up to `last_processed_message_id`. A turn that would
    have started runs but found the agent's sleep-time budget spent records
    why in `skipped` and starts none (the messages wait for the next one).
    """

    group_id: str
    agent_id: str
    # The manager's run this turn counts.
    run_id: str
    turns_counter: int
    started: list[CompanionRun] = Field(default_factory=list)
    # The transcript the companions read: the manager's messages after this one
    # (None: from its first) up to and including `last_processed_message_id`.
    after_message_id: str | None = None
    last_processed_message_id: str | None = None
    skipped: str | None = None
