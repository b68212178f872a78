"""POST .../messages/preview-raw-payload (an agent's and a conversation's): the request the
run's first model call would send its provider, built by the executor's own loop on the
agent as it is and not sent (o_executor/preview.py). Nothing is recorded."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException

from o_contracts import subjects
from o_contracts.requests import PreviewRun, RunPreviewed
from o_contracts.subjects import Lane
from o_gateway.executor_requests import ask_executor
from o_gateway.images import store_images
from o_gateway.routes.conversations import conversation_request
from o_gateway.routes.messages import agent_and_pending, checked_answers, start_run
from o_gateway.routes.paths import route
from o_gateway.schemas import ConversationMessageBody, SendMessageBody
from o_gateway.state import GW, Gateway, checked_id
from o_runtime import provider_registry

router = APIRouter()

PREVIEW_TIMEOUT = 30.0


@route(router, "POST", "/v1/agents/{agent_id}/messages/preview-raw-payload")
async def preview_model_request(agent_id: str, body: SendMessageBody, gw: GW) -> dict[str, Any]:
    """The provider request the agent's next run would send first, for these messages."""
    return await preview_in(gw, Lane(checked_id(agent_id, "agent")), body)


@route(router, "POST", "/v1/conversations/{conversation_id}/messages/preview-raw-payload")
async def preview_conversation_model_request(
    conversation_id: str, body: ConversationMessageBody, gw: GW
) -> dict[str, Any]:
    """The same in a conversation (its blocks, model and settings, as a message to it)."""
    lane, sent = await conversation_request(gw, conversation_id, body)
    return await preview_in(
        gw,
        lane,
        sent.body,
        isolated_block_ids=sent.isolated_block_ids,
        override_settings=sent.override_settings,
    )


async def preview_in(
    gw: Gateway,
    lane: Lane,
    body: SendMessageBody,
    isolated_block_ids: list[str] | None = None,
    override_settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    if body.override_model:
        await provider_registry.ensure_handle(body.override_model, gw.pool)
    # Refused as the same messages sent would be (an unknown agent, a call awaiting approval).
    _, pending = await agent_and_pending(gw, lane.agent_id, lane.conversation_id)
    if checked_answers(body, pending):
        raise HTTPException(
            422,
            "answers to pending tool calls run those tools before the model is asked:"
            " a preview takes new messages only",
        )
    # (Images sent as data are stored, content-addressed, as a send stores them: the
    # executor reads them from the store as it reads a run's.)
    await store_images(gw, body)
    command = start_run(
        lane, body, isolated_block_ids=isolated_block_ids, override_settings=override_settings
    )
    # Read-your-writes: the preview includes every message the log holds so far.
    last = await gw.eventlog.last_seq(lane.events)
    reply = await ask_executor(
        gw,
        subjects.EXECUTOR_PREVIEW_RUN,
        PreviewRun(command=command.data, min_seq=last),
        timeout=PREVIEW_TIMEOUT,
        doing="preview the request",
        too_slow="building the request took too long",
    )
    answer = RunPreviewed.decode(reply)
    if not answer.ok or answer.payload is None:
        raise HTTPException(answer.status, answer.error)
    return answer.payload
