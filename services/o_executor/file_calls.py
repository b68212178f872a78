"""The files tools in a run: carried out by the memory service.

`open_files` changes what the agent sees, so it is an `OpenFiles` command whose id
derives from the run and the call: a resumed run sends the same command and is answered
from its record, never opening twice. `grep_files` and `semantic_search_files` are
reads, asked on `o.rpc.memory.file_search`; asking again after a crash is harmless.
"""

from __future__ import annotations

from typing import Any

from nats.errors import TimeoutError as NatsTimeout
from pydantic import ValidationError

from o_contracts import subjects
from o_contracts.envelope import Envelope
from o_contracts.file_commands import FileOpenRequest, OpenFiles
from o_contracts.file_requests import FileSearchAnswer, FileSearchTool, SearchFiles
from o_contracts.ids import derived_id
from o_contracts.requests import first_error
from o_executor.run.deps import ToolOutcome
from o_runtime.commands import CommandTimeout, send_and_wait
from o_runtime.eventlog import EventLog
from o_runtime.watched_requests import request_watched

PRODUCER = "executor"
SEARCH_TIMEOUT = 60.0
OPEN_TIMEOUT = 60.0
OPEN_RESEND = 3.0


def open_command(
    cause: Envelope[Any], agent_id: str, run_id: str, call_id: str, args: dict[str, Any]
) -> Envelope[OpenFiles]:
    """The call's OpenFiles (ValueError with a message for the model if the arguments
    are not open_files')."""
    unknown = set(args) - {"file_requests", "close_all_others"}
    if unknown:
        raise ValueError(f"unknown argument(s): {', '.join(sorted(unknown))}")
    requests = args.get("file_requests")
    if not isinstance(requests, list):
        raise ValueError("file_requests must be a list of {file_name, offset, length}")
    try:
        files = [
            FileOpenRequest(
                file_name=r.get("file_name"), offset=r.get("offset"), length=r.get("length")
            )
            if isinstance(r, dict)
            else FileOpenRequest(file_name=str(r))
            for r in requests
        ]
        command = OpenFiles(
            agent_id=agent_id,
            files=files,
            close_all_others=bool(args.get("close_all_others") or False),
        )
    except ValidationError as exc:
        raise ValueError(f"invalid file_requests: {first_error(exc)}") from exc
    return cause.caused(
        command, aggregate_id=agent_id, producer=PRODUCER, id=derived_id("cmd", run_id, call_id)
    )


async def open_files(
    eventlog: EventLog,
    cause: Envelope[Any],
    agent_id: str,
    run_id: str,
    call_id: str,
    args: dict[str, Any],
) -> ToolOutcome:
    try:
        command = open_command(cause, agent_id, run_id, call_id, args)
    except ValueError as exc:
        return ToolOutcome(False, str(exc))
    try:
        reply = await send_and_wait(
            eventlog,
            subjects.memory_command_subject(agent_id),
            command,
            timeout=OPEN_TIMEOUT,
            resend_every=OPEN_RESEND,
        )
    except CommandTimeout as exc:
        return ToolOutcome(False, f"memory service did not answer: {exc}")
    if not reply.ok:
        return ToolOutcome(False, reply.error or "open_files failed")
    return ToolOutcome(True, str((reply.result or {}).get("message", "")))


async def search_files(
    eventlog: EventLog, agent_id: str, tool: FileSearchTool, args: dict[str, Any]
) -> ToolOutcome:
    request = SearchFiles(agent_id=agent_id, tool=tool, arguments=args)
    try:
        # (watched: a memory replica that dies mid-search is asked around at once)
        msg = await request_watched(
            eventlog.nc,
            subjects.MEMORY_SEARCH_FILES,
            request.encode(),
            role="memory",
            timeout=SEARCH_TIMEOUT,
        )
    except (TimeoutError, NatsTimeout):
        return ToolOutcome(False, "the memory service did not answer the search in time")
    answer = FileSearchAnswer.decode(msg.data)
    return ToolOutcome(answer.ok, answer.text)
