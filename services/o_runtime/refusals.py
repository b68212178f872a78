"""The refusals a command consumer answered, kept for the command's redeliveries.

A refused command (its handler raised AppendRejected: a missing block, a block over its
limit, a conversation busy) changes nothing, so the log holds no trace of it. Its refusal
goes to the sender, then the command is acknowledged; an ack lost on the way (NATS restarted
between the two) has JetStream deliver it again after the ack wait, and decided afresh on
what is there by then it could be made: the sender was told "refused" (a run recorded its
tool call as failed) and the change happened all the same. So each consumer keeps its
refusals in the KV bucket `o_refused`, under `<consumer>.<digest of the command's id>`, for
as long as the commands stream keeps commands; a redelivered command finds its refusal there
and is answered with it, changing nothing.

Only redeliveries ask (a first delivery has nothing to find: the hot path pays nothing). A
command sent again under a new Nats-Msg-Id (`send_and_wait`'s resend of a command the
stream already holds, a client's retry under an Idempotency-Key) is a first delivery of a
new message, and is decided again: a retry of a refused request is a new attempt.
"""

from __future__ import annotations

import hashlib
import logging

from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from o_contracts.base import Reply
from o_runtime.kv_buckets import kept_bucket, opened

log = logging.getLogger(__name__)

REFUSED_BUCKET = "o_refused"
# As long as the commands stream keeps a command (o_runtime/eventlog.py stream_configs): no
# command is redelivered after that.
KEY_MAX_AGE = 7 * 24 * 3600.0


def bucket_config(replicas: int = 1) -> KeyValueConfig:
    return kept_bucket(REFUSED_BUCKET, KEY_MAX_AGE, replicas)


def refusal_key(consumer: str, command_id: str) -> str:
    """The command's key (a digest: a command's id comes from its sender, and a key may
    hold only some characters)."""
    digest = hashlib.sha256(command_id.encode()).hexdigest()[:40]
    return f"{consumer}.{digest}"


class Refusals:
    """One consumer's refusals (`consumer`: its durable name)."""

    def __init__(self, kv: KeyValue, consumer: str) -> None:
        self.kv = kv
        self.consumer = consumer

    @classmethod
    async def open(cls, js: JetStreamContext, consumer: str, replicas: int = 1) -> Refusals:
        return cls(await opened(js, bucket_config(replicas)), consumer)

    async def recorded(self, command_id: str) -> Reply | None:
        """The refusal this consumer answered the command with, if it refused it."""
        try:
            entry = await self.kv.get(refusal_key(self.consumer, command_id))
        except KeyNotFoundError:
            return None
        return Reply.model_validate_json(entry.value or b"{}")

    async def record(self, command_id: str, reply: Reply) -> None:
        await self.kv.put(refusal_key(self.consumer, command_id), reply.model_dump_json().encode())
