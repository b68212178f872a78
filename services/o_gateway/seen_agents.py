"""The agents a message may be sent to before the agent is read.

A message to an agent (its default conversation, no policy of its own) read the agent and
its waiting tool calls first, then sent the run's command: one Postgres round trip on every
run's path. The executor reads the agent anyway and holds the run's input to the same rules
(o_contracts/approval_rules.py, and the agent's concurrency default for a command sent with
`StartRun.enqueue_only`), so for an agent this process read recently, with a default that
queues its runs, the command goes first and the executor's reply says what the read would
have: the agent's type and sleep-time, or a refusal in the API's words.

Recently: no commit of the agents projection heard since (its position, as this process's
projection watcher knows it, is kept with each agent and must be the same). A change of an
agent's concurrency default is such a commit, and the change's request is answered only once
it is visible, by which time the gateway that made it has heard it (in-process) and every
other has been sent its NOTIFY: so the first message after it reads the agent again and
meets the new default at once, not behind a run in flight. Any agent's change forgets them
all (a notification names the projection, not the agent); the projection also commits its
position about once a second while runs go, so an agent is read again that often.

Only agents read: a first message to an id the gateway never met (a typo, a probe) is read
first and answered 404 without a command in the log. An agent deleted since it was read is
refused by the executor (404, nothing recorded) and forgotten here.
"""

from __future__ import annotations

from collections import OrderedDict

# Agents remembered per gateway process (an id and a position each: ~120 bytes).
CAPACITY = 50_000


class SeenAgents:
    """Agent ids read with a concurrency default that queues runs, each with the agents
    projection's position when it was read; the most recent last (bounded: the oldest are
    forgotten first)."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._marks: OrderedDict[str, int] = OrderedDict()
        self._capacity = capacity

    def holds(self, agent_id: str, mark: int) -> bool:
        """Whether `agent_id` was read at the agents projection's position `mark`."""
        return self._marks.get(agent_id) == mark

    def saw(self, agent_id: str, mark: int) -> None:
        self._marks[agent_id] = mark
        self._marks.move_to_end(agent_id)
        while len(self._marks) > self._capacity:
            self._marks.popitem(last=False)

    def forget(self, agent_id: str) -> None:
        self._marks.pop(agent_id, None)
