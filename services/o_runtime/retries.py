"""How long a message whose handling failed waits before it is tried again.

Command consumers (commands.py), event reactors (reactor.py) and the schedules' fires
(o_schedules/dispatch.py) share it. Two kinds of failure, two paces:

- an outage (NATS or Postgres away: not the message's fault) is tried again soon and often,
  however long it lasts, and never dead-letters a message;
- the handler's own failure backs off further, up to the fifth try, which dead-letters it
  (commands.MAX_DELIVERIES). The first delay is a setting (O_FAILURE_RETRY_DELAY, 2 s) so that
  a deployment, or a test of dead letters, can have a failing message's five tries sooner or
  later than 2 + 4 + 8 + 16 s.
"""

from __future__ import annotations

from dataclasses import dataclass

from o_runtime.env import Env

# After an outage: this, doubling, up to OUTAGE_LONGEST.
OUTAGE_FIRST = 0.5
OUTAGE_LONGEST = 5.0
# After the handler's own failure: the first delay (doubling) unless set, and the longest.
FAILURE_FIRST = 2.0
FAILURE_LONGEST = 30.0


@dataclass(frozen=True)
class Retries:
    # The first delay after a handler's own failure; doubles at each try.
    failure_first: float = FAILURE_FIRST

    @classmethod
    def from_env(cls, env: Env) -> Retries:
        return cls(failure_first=env.number("O_FAILURE_RETRY_DELAY", FAILURE_FIRST, minimum=0.01))

    def delay(self, attempt: int, outage: bool) -> float:
        """Seconds before trying again a message whose `attempt`-th handling (from 1) failed."""
        if outage:
            return min(OUTAGE_FIRST * 2.0 ** min(attempt - 1, 10), OUTAGE_LONGEST)
        return min(self.failure_first * 2.0 ** min(attempt - 1, 10), FAILURE_LONGEST)
