"""Where a message (or an attached block) sits among an agent's: its position.

Several messages can come from one event (a run's input messages), and a
summary is placed right before the first message it kept; both need room
between two events' positions. A position is the event's stream sequence
times SLOTS plus the item's offset within the event.
"""

from __future__ import annotations

SLOTS = 1000


def position(seq: int, offset: int = 0) -> int:
    """The position of the `offset`-th item of the event at stream sequence `seq`."""
    return seq * SLOTS + offset


def before(kept: int) -> int:
    """The position right before `kept` (a summary's, before the first message it kept)."""
    return kept - 1


# An imported history's messages in one event (MessagesImported) take every other
# slot, so there is room for a summary before each; at most this many per event.
MAX_IMPORTED_PER_EVENT = (SLOTS - 1) // 2


def imported_offset(index: int) -> int:
    """The offset, within its event, of the `index`-th message of an imported history part."""
    return 2 * index + 1
