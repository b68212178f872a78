"""Waiting until nats-server holds what a connection wrote, without nats-py's flush timeout.

nats-py's `flush(timeout)` sends a PING and waits for the PONG. When that wait times out it
cancels the PONG's future but leaves it queued, so a PONG that comes later (from a server
that paused, or was slow) is set on a cancelled future. That raises InvalidStateError in the
read loop, and the read loop stops for good: the connection stays up but hears nothing
again. Checked with nats-py 2.16.0 against a nats-server frozen by SIGSTOP: the test in
tests/integration/test_nats_flush.py fails with `nc.flush(timeout=...)` in place of this
module's `flush` (its second message is never heard).

So O never lets nats-py's own timeout fire. The flush runs with a timeout far beyond the
caller's, and the caller stops waiting on its own. By the time that long timeout fires, a
silent server has been judged stale (after `ping_interval` times `max_outstanding_pings`),
and the reconnection has dropped the PONGs still waited for.
"""

from __future__ import annotations

import asyncio

from nats.aio.client import Client as NATS

# How long O's services wait for a flush (nats-py's own default).
FLUSH_WITHIN = 10.0
# Far beyond any stale-connection detection (nats-py's default is 2 min x 2 pings).
_NATS_PY_TIMEOUT = 24 * 3600


async def flush(nc: NATS, timeout: float) -> None:
    """Return once the server has everything written on `nc` so far.

    Raises TimeoutError after `timeout`. The connection is still usable after that: the
    PONG may still come, and is then taken as the answer to a wait that no one holds any more.
    """
    waiting = asyncio.ensure_future(nc.flush(timeout=_NATS_PY_TIMEOUT))
    waiting.add_done_callback(_retrieve)
    await asyncio.wait_for(asyncio.shield(waiting), timeout)


def _retrieve(task: asyncio.Future[None]) -> None:
    # A flush that was given up on can end in an error much later, when no one waits for
    # it any more. Retrieving the error here keeps asyncio from logging it as never retrieved.
    if not task.cancelled():
        task.exception()
