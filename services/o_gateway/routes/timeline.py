"""`GET /v1/runs/{run_id}/timeline`: an O extension (the console's run view, docs/console.md).

The run's events are read from the log, on its conversation's subject from the run's first
event to its `RunCompleted` (or the log's end while it is in flight), and folded into a
timeline by o_gateway/run_timeline.py. Any gateway replica can answer it; a client follows a
run in flight by asking again until `complete` is true.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

from fastapi import APIRouter

from o_contracts.envelope import MalformedMessage, decode
from o_contracts.events.runs import RunCompleted, facts
from o_contracts.subjects import Lane
from o_gateway.routes.paths import route
from o_gateway.routes.runs import run_json, run_row
from o_gateway.run_timeline import Fact, timeline
from o_gateway.state import GW

router = APIRouter()


@route(router, "GET", "/v1/runs/{run_id}/timeline")
async def run_timeline(run_id: str, gw: GW) -> dict[str, Any]:
    run = await run_row(gw, run_id)
    lane = Lane(run["agent_id"], run["conversation_id"])
    # Its RunStarted, or (queued, not started yet) its RunQueued.
    start = run["started_seq"] or run["last_seq"]
    read: list[Fact] = []
    # (replay is an async generator: closed at once when the run's end is found, so its
    # consumer goes then instead of after reading the conversation's later runs.)
    async with aclosing(gw.eventlog.replay(lane.events, start)) as events:
        async for raw in events:
            try:
                envelope = decode(raw.data)
            except MalformedMessage:
                continue  # (not the run's: the run's own events were decoded when recorded)
            # (A run's end with its last answer: the answer, then the end.)
            read += [Fact(raw.seq, envelope.time, fact) for fact in facts(envelope.data)]
            event = envelope.data
            if isinstance(event, RunCompleted) and event.run_id == run["id"]:
                break
    # Read again: the run as it stands now is at least as far along as its events read.
    return {"run": run_json(await run_row(gw, run_id))} | timeline(run["id"], read)
