"""The dead-letter subject: where malformed or poison messages go, with the reason.

Consumers never stop on a bad message: it is copied here (original bytes,
reason and origin in headers) and acknowledged, and the consumer goes on.
"""

from __future__ import annotations

import logging

from nats.js import JetStreamContext

from o_contracts import subjects
from o_runtime.instruments import measured

log = logging.getLogger(__name__)


async def dead_letter(
    js: JetStreamContext,
    consumer: str,
    data: bytes,
    reason: str,
    *,
    origin_subject: str,
    origin_seq: int,
) -> None:
    # Deduplicated by origin, so a redelivered bad message is dead-lettered once.
    headers = {
        "Nats-Msg-Id": f"dlq-{consumer}-{origin_subject}-{origin_seq}",
        "O-Reason": reason[:1000],
        "O-Consumer": consumer,
        "O-Origin-Subject": origin_subject,
        "O-Origin-Seq": str(origin_seq),
    }
    ack = await js.publish(
        subjects.dead_letter_subject(consumer),
        data,
        stream=subjects.DEAD_LETTER_STREAM,
        headers=headers,
    )
    if not ack.duplicate:
        measured.dead_letters.add(1, {"consumer": consumer})
    log.warning("dead-lettered %s seq %d for %s: %s", origin_subject, origin_seq, consumer, reason)
