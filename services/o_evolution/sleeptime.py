"""Sleep-time turns decided: whether a manager's run starts its companions, and what they read.

Pure functions, no I/O (o_evolution/turns.py reads the state and appends).
Letta's rules: a group's counter starts at -1 and each of the manager's runs
moves it to (counter + 1) % frequency; the companions run when it comes to 0,
so on the first turn and then every `frequency` turns (every turn without a
frequency). A run that left no messages starts nothing. O adds a budget: a turn
that would start runs past it records why it did not, and its messages wait
for the next turn that runs. O also moves the memory service's reflections onto
this schedule: a turn that runs while the manager's archival memories have passed
their importance threshold starts one reflection run of the first companion too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from o_contracts.events import SleeptimeTurnCounted
from o_contracts.events.groups import CompanionRun
from o_contracts.ids import derived_id
from o_contracts.models import ChatMessage
from o_evolution.settings import SleeptimeBudget


@dataclass(frozen=True)
class GroupState:
    group_id: str
    companions: tuple[str, ...]
    frequency: int | None
    # The counter after the last counted turn (-1 before the first).
    counter: int = -1
    # The last manager message companions have read (None: none yet).
    last_processed: str | None = None


@dataclass(frozen=True)
class Spent:
    """What the agent's companions used recently (the budget's measure)."""

    runs_last_hour: int = 0
    tokens_last_day: int = 0


def companion_run_id(manager_run_id: str, companion_id: str) -> str:
    return derived_id("run", manager_run_id, "sleeptime", companion_id)


def reflection_run_id(manager_run_id: str, companion_id: str) -> str:
    return derived_id("run", manager_run_id, "reflection", companion_id)


def over_budget(spent: Spent, budget: SleeptimeBudget, runs: int) -> str | None:
    if spent.runs_last_hour + runs > budget.runs_per_hour:
        return (
            f"sleep-time budget spent: {spent.runs_last_hour} companion runs in the last hour"
            f" (O_SLEEPTIME_RUNS_PER_HOUR={budget.runs_per_hour})"
        )
    if spent.tokens_last_day >= budget.tokens_per_day:
        return (
            f"sleep-time budget spent: {spent.tokens_last_day} tokens in the last day"
            f" (O_SLEEPTIME_TOKENS_PER_DAY={budget.tokens_per_day})"
        )
    return None


def count_turn(
    group: GroupState,
    agent_id: str,
    run_id: str,
    last_message_id: str | None,
    spent: Spent,
    budget: SleeptimeBudget,
    reflection_due: bool = False,
) -> SleeptimeTurnCounted:
    """The turn `run_id` makes of `group`: counted, and maybe starting the companions.

    `reflection_due`: the manager's unreflected memories have passed their threshold.
    """
    counter = group.counter
    if group.frequency:
        counter = (counter + 1) % group.frequency
    turn = SleeptimeTurnCounted(
        group_id=group.group_id,
        agent_id=agent_id,
        run_id=run_id,
        turns_counter=counter,
        after_message_id=group.last_processed,
        last_processed_message_id=group.last_processed,
    )
    due = not group.frequency or counter == 0
    if not due or last_message_id is None or not group.companions:
        return turn
    started = [
        CompanionRun(agent_id=c, run_id=companion_run_id(run_id, c)) for c in group.companions
    ]
    if reflection_due:
        first = group.companions[0]
        started.append(
            CompanionRun(
                agent_id=first, run_id=reflection_run_id(run_id, first), purpose="reflection"
            )
        )
    skipped = over_budget(spent, budget, len(started))
    if skipped is not None:
        return turn.model_copy(update={"skipped": skipped})
    return turn.model_copy(
        update={"started": started, "last_processed_message_id": last_message_id}
    )


def _line(who: str, text: str) -> str:
    return f"{who}: {text}"


def transcript_line(message: ChatMessage) -> str | None:
    """One manager message as the companion reads it (Letta's framing); None to leave out."""
    if message.role == "user":
        text = message.content or ""
        if message.parts:
            text = " ".join(getattr(p, "text", None) or "[Image Here]" for p in message.parts)
        return _line(message.name or "user", text)
    if message.role == "assistant":
        lines = []
        if message.reasoning:
            lines.append(_line("assistant", f"<thinking>{message.reasoning}</thinking>"))
        if message.content:
            lines.append(_line("assistant", message.content))
        for call in message.tool_calls:
            said = _said(call.name, call.arguments)
            lines.append(
                _line("assistant", said if said is not None else f"Calling tool {call.name}")
            )
        return "\n".join(lines) or None
    if message.role == "tool" and message.content and message.content != "None":
        return _line("assistant", f"Tool call returned {message.content}")
    return None


def _said(tool: str, arguments: str) -> str | None:
    if tool != "send_message":
        return None
    try:
        said = json.loads(arguments).get("message")
    except (ValueError, AttributeError):
        return None
    return str(said) if said is not None else None


# A companion's input must fit in one command (NATS' 1 MiB): the oldest lines of a
# longer transcript are left out, and the companion is told so.
MAX_TRANSCRIPT_CHARS = 200_000


def companion_input(messages: Sequence[ChatMessage]) -> str:
    """What a companion is asked: review these messages and keep the shared memory."""
    lines = [line for m in messages if (line := transcript_line(m)) is not None]
    size, kept = 0, 0
    for line in reversed(lines):
        size += len(line) + 1
        if size > MAX_TRANSCRIPT_CHARS:
            break
        kept += 1
    if kept < len(lines):
        lines = [f"[{len(lines) - kept} earlier lines left out]", *lines[len(lines) - kept :]]
    return (
        "<system-reminder>\n"
        "You are a sleep-time agent: you run in the background, after a conversation between a"
        " primary agent and its user has happened. You are not the primary agent.\n"
        '- Messages labelled "assistant" are the primary agent\'s (not yours).\n'
        '- Messages labelled "user" are from the primary agent\'s user.\n\n'
        "Review the conversation and use your memory tools to update the memory blocks with"
        " whatever is worth keeping. Your memory_persona block holds your own instructions.\n"
        "</system-reminder>\n\n"
        "Messages:\n" + "\n".join(lines)
    )
