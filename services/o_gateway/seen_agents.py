"""The agents a message may be sent to before the agent is read.

A message to an agent (its default conversation, no policy of its own) read the agent and
its waiting tool calls first, then sent the run's command: one Postgres round trip on every
run's path. The executor reads the agent anyway and holds the run's input to the same rules
(o_contracts/approval_rules.py), so for an agent this process has read, the command goes
first, marked `StartRun.enqueue_only`, and the executor's reply says what the read would
have: the agent's type and sleep-time, or a refusal in the API's words.

The agent's concurrency default (o_contracts/concurrency.py) is the one thing the gateway
decided from the read that the executor did not: it matters only when a run is in flight,
and the executor sees that as the command arrives (a run ahead of it in the agent's queue).
There a command sent unread waits for its turn only where the default queues runs; under
another default it leaves the queue at once with nothing recorded, and the message goes
the usual way, read first (o_executor/live/execution.py, LiveRun._may_wait). So what is
remembered here never decides anything: a default changed since the agent was read meets
the next message all the same, at the executor.

What is remembered is whether the agent's default, when last read here, queued runs: an
agent whose default does not goes the usual way, so that its messages do not each pay a
refusal first while its runs are busy (a read of it that finds the default changed back
sends the next one first again). An id never read here is read first: a first message to
an id nobody created (a typo, a probe) is answered 404 with no command sent. An agent
deleted since it was read is refused by the executor (404, nothing recorded) and forgotten.
"""

from __future__ import annotations

from collections import OrderedDict

# Agents remembered per gateway process (an id and a flag each: ~100 bytes).
CAPACITY = 50_000


class SeenAgents:
    """Agent ids read by this process, each with whether its concurrency default queued
    runs when it was last read; the most recent last (bounded: the oldest are forgotten
    first)."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._queues: OrderedDict[str, bool] = OrderedDict()
        self._capacity = capacity

    def sends_first(self, agent_id: str) -> bool:
        """Whether a message to `agent_id` may go before the agent is read."""
        return self._queues.get(agent_id, False)

    def saw(self, agent_id: str, queues: bool) -> None:
        self._queues[agent_id] = queues
        self._queues.move_to_end(agent_id)
        while len(self._queues) > self._capacity:
            self._queues.popitem(last=False)

    def forget(self, agent_id: str) -> None:
        self._queues.pop(agent_id, None)
