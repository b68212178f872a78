"""Gateway-side senders: commands to other services, answered as HTTP results or errors."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException

from o_contracts import subjects
from o_contracts.base import Command, Reply
from o_contracts.envelope import Envelope
from o_runtime.commands import CommandTimeout, send_and_wait
from o_runtime.eventlog import ConcurrencyConflict, EventLog

PRODUCER = "gateway"


async def append_decided(
    eventlog: EventLog,
    subject: str,
    aggregate_id: str,
    event: Any,
    expected: int | None,
    what: str,
    id: str | None = None,
) -> int:
    """Append a registry's event decided on its row as read (`expected`: that row's
    sequence, 0 for a new aggregate); a change meanwhile is a 409 naming `what`. `id`: the
    event's, where a retry must find what its first try appended."""
    try:
        appended = await eventlog.append(
            subject,
            Envelope.wrap(event, aggregate_id=aggregate_id, producer=PRODUCER, id=id),
            expected_last_seq=expected,
        )
    except ConcurrencyConflict as exc:
        raise HTTPException(409, f"{what} was changed concurrently; try again") from exc
    return appended.seq


async def append_visible(
    gw: Any,
    subject: str,
    aggregate_id: str,
    event: Any,
    expected: int | None,
    what: str,
    projection: str,
    id: str | None = None,
) -> int:
    """`append_decided`, then wait until `projection` shows the event, so the answer the
    gateway builds from it (and the client's next read) sees the change."""
    seq = await append_decided(gw.eventlog, subject, aggregate_id, event, expected, what, id)
    await gw.visible(seq, projection)
    return seq


COMMAND_TIMEOUT = 15.0


async def memory_command(
    gw: Any,
    command: Command,
    key: str,
    timeout: float = COMMAND_TIMEOUT,
    command_id: str | None = None,
) -> Reply:
    """Send a command to the memory service and turn a refusal into an HTTP error.

    `command_id`: the same id for a client's retry of the request (idempotency.py).
    """
    envelope = Envelope.wrap(command, aggregate_id=key, producer=PRODUCER, id=command_id)
    return await answered(
        gw,
        subjects.memory_command_subject(key),
        envelope,
        timeout,
        "the memory service did not answer in time; the change may still apply",
    )


async def answered(
    gw: Any, subject: str, envelope: Envelope[Any], timeout: float, unanswered: str
) -> Reply:
    """Send a command and wait for its reply: a refusal or a timeout is an HTTP error.

    A timeout is 504 with `unanswered` in the detail: the command is durable,
    so its effect may still come.
    """
    reply = await replied(gw, subject, envelope, timeout, unanswered)
    if not reply.ok:
        raise refused(reply)
    return reply


async def replied(
    gw: Any, subject: str, envelope: Envelope[Any], timeout: float, unanswered: str
) -> Reply:
    """Send a command and wait for its reply, a refusal as it came; a timeout is 504."""
    try:
        return await send_and_wait(gw.eventlog, subject, envelope, timeout=timeout)
    except CommandTimeout as exc:
        raise HTTPException(504, f"{unanswered} ({exc})") from exc


def refused(reply: Reply) -> HTTPException:
    """A refusal as the HTTP error it stands for."""
    # (A refusal whose HTTP detail is an object carries it in `result`: approval_rules.py.)
    detail = (reply.result or {}).get("detail") or reply.error or "rejected"
    return HTTPException(reply.status if reply.status >= 400 else 400, detail)
