"""`o.rpc.roll_call` (core NATS, one request, many answers): every O service process
answers with who it is and whether it is ready.

The request's body is empty; each process replies on the request's reply subject with a
`Present` (MessagePack). Who asks gathers the answers for a moment (o_runtime/roll_call.py):
replicas are not known in advance, so there is no "last answer", only a deadline. Unknown
fields are ignored, so a newer replica's answer still reads with an older reader.
"""

from __future__ import annotations

from datetime import datetime

import msgpack
from pydantic import BaseModel, ConfigDict, Field


class Present(BaseModel):
    """One process's answer."""

    model_config = ConfigDict(extra="ignore")

    # The service (gateway, executor, memory, tool_sandbox, evolution).
    service: str
    # This process among the service's replicas: "<host>:<pid>".
    instance: str
    version: str
    started_at: datetime
    ready: bool
    # Each readiness check by name: "ok", or why not (o_runtime/readiness.py).
    checks: dict[str, str] = Field(default_factory=dict)

    def encode(self) -> bytes:
        packed: bytes = msgpack.packb(self.model_dump(mode="json"), use_bin_type=True)
        return packed

    @classmethod
    def decode(cls, data: bytes) -> Present:
        return cls.model_validate(msgpack.unpackb(data, raw=False))
