"""Every uploaded file gets processed: a FileUploaded in the log sends its ProcessFile.

An event reactor (o_runtime/reactor.py) rather than the gateway sending the command
after its append: a gateway that dies between the two would leave the file pending for
ever, while the reactor's durable consumer sees every FileUploaded the log holds. The
reaction only sends the command (milliseconds); the work runs on the files command
consumer, which heartbeats while it works and is delivered again if its worker dies.
The command's id derives from the event's, so a reaction repeated within the stream's
duplicate window is dropped there, and a later one finds the file processed.
"""

from __future__ import annotations

from o_contracts import subjects
from o_contracts.events import FileUploaded
from o_contracts.file_commands import ProcessFile
from o_contracts.ids import derived_id
from o_runtime.eventlog import EventLog, Recorded

PRODUCER = "memory"


class Uploads:
    def __init__(self, eventlog: EventLog) -> None:
        self.eventlog = eventlog

    async def on_uploaded(self, events: list[Recorded]) -> None:
        for rec in events:
            uploaded = rec.envelope.data
            assert isinstance(uploaded, FileUploaded)
            command = rec.envelope.caused(
                ProcessFile(folder_id=uploaded.folder_id, file_id=uploaded.file_id),
                aggregate_id=uploaded.file_id,
                producer=PRODUCER,
                id=derived_id("cmd", rec.envelope.id, "process"),
            )
            await self.eventlog.send_command(
                subjects.files_command_subject(uploaded.file_id), command
            )
