"""The canary keeps each agent's snapshots from one analysis to the next
(o_executor/shadow/snapshot.py: KeptSnapshots), a bounded number of agents'."""

from __future__ import annotations

from typing import cast

from o_executor.shadow.snapshot import BlockFold, Checkpoint, Folding, KeptSnapshots
from o_runtime.eventlog import EventLog

LOG = cast(EventLog, object())  # (kept, never read: no snapshot is taken here)


def test_an_agents_snapshots_are_kept_and_the_least_recently_used_agents_dropped() -> None:
    kept = KeptSnapshots(size=2)
    a, b = kept.of(LOG, "agent-a"), kept.of(LOG, "agent-b")
    assert kept.of(LOG, "agent-a") is a  # (a is now the more recently used)
    kept.of(LOG, "agent-c")
    assert kept.of(LOG, "agent-a") is a
    assert kept.of(LOG, "agent-b") is not b  # dropped for c, made anew


async def test_new_snapshots_start_from_the_checkpoint_given_and_kept_ones_ignore_it() -> None:
    kept = KeptSnapshots(size=2)
    block = BlockFold({"id": "block-1", "value": "v"})
    checkpoint = Checkpoint(10, {"o.evt.block.block-1": Folding((block,), 10)})
    made = kept.of(LOG, "agent-a", checkpoint)
    held = await made.checkpoint(10)
    assert held == checkpoint
    # (copies: reading on never changes the checkpoint)
    assert held.folds["o.evt.block.block-1"].folds[0] is not block
    assert kept.of(LOG, "agent-a", Checkpoint(20, {})) is made
