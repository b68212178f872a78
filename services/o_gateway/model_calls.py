"""One completion outside any run, asked of the executor: the service that holds O's
provider clients (openai and anthropic SDKs, with their retries and the operator's
provider settings), so the gateway never talks to a model itself.

Used by POST /v1/agents/{id}/generate and POST /v1/tools/generate-tool. Nothing is
recorded: the answer goes back to the client that asked.
"""

from __future__ import annotations

from fastapi import HTTPException

from o_contracts import subjects
from o_contracts.requests import GENERATE_WITHIN, Generate, Generated
from o_gateway.executor_requests import ask_executor
from o_gateway.state import Gateway

# The executor answers once the provider has (its own retries included).
GENERATE_TIMEOUT = GENERATE_WITHIN


async def generate(gw: Gateway, request: Generate) -> Generated:
    """The executor's answer, or the HTTP error it stands for (its status and reason)."""
    reply = await ask_executor(
        gw,
        subjects.EXECUTOR_GENERATE,
        request,
        timeout=GENERATE_TIMEOUT,
        doing="generate",
        too_slow="the model did not answer in time",
        # (a completion may take minutes: one lost with its executor is asked again)
        watched=True,
    )
    answer = Generated.decode(reply)
    if not answer.ok:
        raise HTTPException(answer.status, answer.error)
    return answer
