"""`POST /v1/chat/completions`: an agent through OpenAI's SDKs (o_gateway/chat_completions.py)."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from o_contracts.ids import InvalidId
from o_contracts.subjects import Lane
from o_gateway.chat_completions import (
    ChatCompletionBody,
    ChunkStream,
    agent_of,
    completion,
    user_message,
)
from o_gateway.guards import CheckedRoute, http_error, validation_error
from o_gateway.idempotency import IdempotencyKey
from o_gateway.routes.messages import send_in
from o_gateway.routes.paths import route
from o_gateway.schemas import SendMessageBody
from o_gateway.state import GW, checked_id
from o_gateway.streaming import streamed

router = APIRouter()


class OpenAIErrorsRoute(CheckedRoute):
    """Its refusals carry OpenAI's `error` object beside O's `detail`, so that OpenAI's
    SDKs, which read only the former, tell their users why."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def with_error(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                return _with_openai_error(await validation_error(request, exc))
            except HTTPException as exc:
                return _with_openai_error(await http_error(request, exc))
            except InvalidId as exc:  # (a malformed agent id: the app's 422)
                return _with_openai_error(JSONResponse({"detail": str(exc)}, status_code=422))

        return with_error


def _with_openai_error(response: Response) -> Response:
    body = json.loads(bytes(response.body))
    detail = body.get("detail")
    body["error"] = {
        "message": detail if isinstance(detail, str) else json.dumps(detail),
        "type": "invalid_request_error" if response.status_code < 500 else "server_error",
    }
    headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
    return JSONResponse(body, status_code=response.status_code, headers=headers)


@route(router, "POST", "/v1/chat/completions", route_class_override=OpenAIErrorsRoute)
async def create_chat_completion(
    body: ChatCompletionBody, gw: GW, idempotency_key: IdempotencyKey = None
) -> Any:
    """The agent named by `model` answers the request's last user message, in its default
    conversation (queued behind a run in progress, as the agent's message routes are)."""
    lane = Lane(checked_id(agent_of(body), "agent"))
    agent = await gw.agent_row(lane.agent_id)
    model = (agent["llm_config"] or {}).get("model") or "unknown"
    message = user_message(body)
    if not body.stream:
        request = SendMessageBody(messages=[message])
        reply = await send_in(lane, request, gw, False, idempotency_key)
        run = await gw.pool.fetchrow(
            "SELECT id, stop_reason, error FROM runs WHERE id = $1", reply["usage"]["run_ids"][0]
        )
        if run["error"] and run["stop_reason"] != "end_turn":
            # (The stream says it with OpenAI's error object; a completion can only fail.)
            status = 502 if run["stop_reason"] == "llm_api_error" else 500
            raise HTTPException(
                status,
                f"the agent's run {run['id']} ended with {run['stop_reason']}: {run['error']}",
            )
        return completion(model, reply)
    request = SendMessageBody(messages=[message], streaming=True, stream_tokens=True)
    letta = await send_in(lane, request, gw, True, idempotency_key)
    include_usage = body.stream_options is not None and body.stream_options.include_usage
    chunks = ChunkStream(model, include_usage=include_usage)
    return streamed(chunks.transform(letta.body_iterator))
