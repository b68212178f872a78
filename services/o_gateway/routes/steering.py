"""A message that steers a run in flight (concurrency "steer"): sent, decided, answered.

The request's StartRun goes to the commands stream first, so that the message
runs on its own if no run takes it; then the conversation's running run is
asked to take it (o_gateway/concurrency.py). The answer (JSON or stream) is
what the run that took it did from then on, as that run's; or, if it ended
first, the request's own run.
"""

from __future__ import annotations

from typing import Any

from o_contracts.commands import StartRun
from o_contracts.envelope import Envelope
from o_contracts.ordering import SLOTS
from o_gateway import concurrency, render
from o_gateway.routes.messages import run_end, run_response
from o_gateway.state import Gateway
from o_gateway.streaming import RUN_REPLY_TIMEOUT, stream_run, streamed


async def send_steering(
    gw: Gateway,
    command: Envelope[StartRun],
    agent_type: str,
    streaming: bool,
    view: render.AssistantView,
) -> Any:
    cmd = command.data
    lane = cmd.lane
    last = await gw.eventlog.last_seq(lane.events)
    taken = await concurrency.taken_by(gw, command, last)
    if taken is not None:
        # A retry whose first try was taken already: answered from the run that took it.
        start = taken.seq // SLOTS  # (the RunSteered that took it: a position's event)
        return await _answer(gw, command, agent_type, streaming, view, taken.run_id, start)
    await gw.eventlog.send_command(lane.commands, command)
    steering = await concurrency.steer(gw, command)
    if steering is None:  # no run in flight to take it: the request's own run runs it
        return await _answer(gw, command, agent_type, streaming, view, None, last + 1)
    return await _answer(gw, command, agent_type, streaming, view, steering.run_id, steering.seq)


async def _answer(
    gw: Gateway,
    command: Envelope[StartRun],
    agent_type: str,
    streaming: bool,
    view: render.AssistantView,
    into: str | None,
    start_seq: int,
) -> Any:
    """What became of the message: the run `into` asked to take it (from where it did),
    else the request's own run. Streamed from log position `start_seq` on."""
    cmd = command.data
    lane = cmd.lane
    if streaming:
        return streamed(
            stream_run(
                gw, lane, agent_type, cmd.run_id, start_seq=start_seq, view=view, steered_into=into
            )
        )
    if into is not None:
        seq = await run_end(gw, lane, into, RUN_REPLY_TIMEOUT)
        taken = await concurrency.taken_by(gw, command, seq)
        if taken is not None:
            return await run_response(gw, agent_type, into, seq, view, after=taken.seq)
    seq = await run_end(gw, lane, cmd.run_id, RUN_REPLY_TIMEOUT)
    return await run_response(gw, agent_type, cmd.run_id, seq, view)
