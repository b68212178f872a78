"""The event reactor that sees runs end and asks for their callbacks to be delivered.

It follows every agent's and conversation's subject for RunCompleted (a durable
consumer shared by the gateway replicas: each run end reaches one of them, and
again after a crash before its ack). For the runs that asked for a callback (the
runs projection, read as of the run's end) it sends DeliverCallback, whose id
derives from the run: a run end seen twice sends one command, and a command
handled twice delivers once (deliveries.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from o_contracts import subjects
from o_contracts.commands import DeliverCallback
from o_contracts.events import RunCompleted
from o_contracts.ids import derived_id
from o_contracts.projection_names import RUNS
from o_runtime.eventlog import EventLog, Recorded
from o_runtime.reads import ProjectionReads

log = logging.getLogger(__name__)
PRODUCER = "gateway"
# How long a run end waits for the runs projection to show it (a lag past this is an
# outage to the reactor: it tries again, never drops the run).
PROJECTION_WAIT = 30.0

_WITH_CALLBACK = (
    "SELECT id, agent_id FROM runs WHERE id = ANY($1::text[]) AND callback_url IS NOT NULL"
)


def command_id(run_id: str) -> str:
    return derived_id("cmd", run_id, "callback")


@dataclass
class CallbackScheduler:
    eventlog: EventLog
    reads: ProjectionReads

    async def on_runs_completed(self, records: list[Recorded]) -> None:
        ended = {}
        for rec in records:
            event = rec.envelope.data
            assert isinstance(event, RunCompleted)
            ended[event.run_id] = rec
        # One checked read for the batch, as of its last run end.
        last = max(rec.seq for rec in ended.values())
        async with self.reads.at(last, RUNS, timeout=PROJECTION_WAIT) as conn:
            rows = await conn.fetch(_WITH_CALLBACK, list(ended))
        for row in rows:
            rec = ended[row["id"]]
            command = rec.envelope.caused(
                DeliverCallback(run_id=row["id"], agent_id=row["agent_id"], completed_seq=rec.seq),
                aggregate_id=row["id"],
                producer=PRODUCER,
                id=command_id(row["id"]),
            )
            await self.eventlog.send_command(subjects.callback_command_subject(row["id"]), command)
            log.info("run %s ended: its callback is on its way", row["id"])
