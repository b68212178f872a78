"""Events of a message that arrived while a run was in flight (o_contracts/concurrency.py).

`interrupt` and `rollback` are decided with the new run's `RunQueued`
(`interrupts`, `rollback`), one append on the conversation's subject; these are
what follows. All of them are on the conversation's subject, next to the runs
they concern.
"""

from __future__ import annotations

from pydantic import Field

from o_contracts.base import Event
from o_contracts.models import ChatMessage


class RunSteerRequested(Event):
    """A message was sent to steer run `run_id`, which was running (appended by the gateway).

    The run takes it before its next model call (`RunSteered`). If it ends
    first, the request's own run, `steer_run_id`, runs the message instead: its
    StartRun was sent before this was decided, so the message is never lost.
    """

    run_id: str
    agent_id: str
    # The run the request would be (and is, if `run_id` ends without taking it).
    steer_run_id: str
    messages: list[ChatMessage] = Field(min_length=1)


class RunSteered(Event):
    """The run took steering messages into its context, before the model call of
    `step_number` (appended by the executor running it, before that call).

    A resumed run adds the same messages at the same step; the requests named
    here are done (their own runs have nothing left to do).
    """

    run_id: str
    agent_id: str
    step_number: int
    steer_run_ids: list[str] = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)


class RunRolledBack(Event):
    """Run `run_id` was interrupted by `by_run_id` with `rollback`, and has stopped: its
    messages leave the conversation's context and its listings (the log keeps them, the
    run's own messages route still shows them). Appended by the executor of `by_run_id`
    before that run starts."""

    run_id: str
    agent_id: str
    by_run_id: str
