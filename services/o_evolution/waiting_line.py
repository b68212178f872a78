"""Which of the evaluations waiting for a shadow slot goes next: the oldest.

An evaluation that finds the shadow busy goes back to the commands stream and returns every
few seconds (o_evolution/evaluation.py); the one that returns just as a slot frees takes it.
Left at that, an evaluation proposed early could be overtaken again and again by later ones.
So the process notes each waiting evaluation's position in the commands stream (the same on
every redelivery) when it returns, and lets one wait for the next slot only if no older one
is known to wait. One not seen again for `forget_after` seconds (taken by another replica,
or no longer waiting) is forgotten, so it never holds up the line. Pure: the caller gives
the clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class WaitingLine:
    forget_after: float
    _seen: dict[int, float] = field(default_factory=dict)  # stream position -> last seen

    def older_waits(self, position: int, now: float) -> bool:
        """Whether an evaluation older than the one at `position` waits (noting this one as
        waiting, seen `now`)."""
        self._seen = {p: t for p, t in self._seen.items() if now - t <= self.forget_after}
        self._seen[position] = now
        return any(p < position for p in self._seen)

    def leave(self, position: int) -> None:
        """The evaluation at `position` waits no more (it is next in line, or running)."""
        self._seen.pop(position, None)
