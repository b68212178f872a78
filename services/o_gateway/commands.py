"""Gateway-side senders: commands to the memory service, events the gateway owns."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException

from o_contracts import subjects
from o_contracts.base import Command, Reply
from o_contracts.envelope import Envelope
from o_runtime.commands import CommandTimeout, send_and_wait

PRODUCER = "gateway"
COMMAND_TIMEOUT = 15.0


async def memory_command(
    gw: Any, command: Command, key: str, timeout: float = COMMAND_TIMEOUT
) -> Reply:
    """Send a command to the memory service and turn a refusal into an HTTP error."""
    envelope = Envelope.wrap(command, aggregate_id=key, producer=PRODUCER)
    try:
        reply = await send_and_wait(
            gw.eventlog, subjects.memory_command_subject(key), envelope, timeout=timeout
        )
    except CommandTimeout as exc:
        raise HTTPException(
            504, f"the memory service did not answer in time; the change may still apply ({exc})"
        ) from exc
    if not reply.ok:
        raise HTTPException(reply.status if reply.status >= 400 else 400, reply.error or "rejected")
    return reply
