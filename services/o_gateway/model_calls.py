"""One completion outside any run, asked of the executor: the service that holds O's
provider clients (openai and anthropic SDKs, with their retries and the operator's
provider settings), so the gateway never talks to a model itself.

Used by POST /v1/agents/{id}/generate and POST /v1/tools/generate-tool. Nothing is
recorded: the answer goes back to the client that asked.
"""

from __future__ import annotations

from fastapi import HTTPException
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from o_contracts import subjects
from o_contracts.requests import Generate, Generated
from o_gateway.state import Gateway

# The executor answers once the provider has (its own retries included).
GENERATE_TIMEOUT = 600.0


async def generate(gw: Gateway, request: Generate) -> Generated:
    """The executor's answer, or the HTTP error it stands for (its status and reason)."""
    try:
        reply = await gw.eventlog.nc.request(
            subjects.EXECUTOR_GENERATE, request.encode(), timeout=GENERATE_TIMEOUT
        )
    except NoRespondersError as exc:
        raise HTTPException(503, "no executor is running to generate") from exc
    except NatsTimeout as exc:
        raise HTTPException(504, "the model did not answer in time") from exc
    answer = Generated.decode(reply.data)
    if not answer.ok:
        raise HTTPException(answer.status, answer.error)
    return answer
