"""Messages: send (JSON or Letta's SSE framing) and list."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query
from nats.aio.msg import Msg

from o_contracts import approval_rules
from o_contracts.base import Reply
from o_contracts.commands import StartRun
from o_contracts.concurrency import AGENT_ROUTES, Concurrency, policy_for
from o_contracts.envelope import Envelope, MalformedMessage, decode, known_type
from o_contracts.events import RunCancellationRequested, RunCompleted, RunQueued
from o_contracts.ids import derived_id, new_id
from o_contracts.limits import MAX_NAME_CHARS
from o_contracts.models import ApprovalDecision, ChatMessage, ClientSkill
from o_contracts.projection_names import RUNS
from o_contracts.subjects import Lane
from o_executor import run_answers
from o_gateway import concurrency, render, sleeptime
from o_gateway.callbacks.accept import accepted_callback_url
from o_gateway.commands import PRODUCER, answered, refused, replied
from o_gateway.conversation_reads import (
    MessageTypeName,
    agent_messages,
    in_context_ids,
    lane_messages,
    of_types,
    rendered_messages,
)
from o_gateway.idempotency import (
    IdempotencyKey,
    command_id_for,
    message_id_for,
    request_digest,
    request_key,
    run_id_for,
)
from o_gateway.images import store_images
from o_gateway.models_config import override_handle
from o_gateway.routes.paths import route
from o_gateway.routes.runs import ACTIVE, run_json, run_row
from o_gateway.schemas import (
    ApprovalCreateBody,
    AsyncMessageBody,
    CancelRunsBody,
    CompactBody,
    MessageCreateBody,
    SendMessageBody,
    content_parts,
    content_text,
)
from o_gateway.state import GW, Gateway, checked_id
from o_gateway.streaming import RUN_REPLY_TIMEOUT, Numbering, stream_run, streamed
from o_gateway.tool_return_groups import message_key, shown
from o_runtime import provider_registry
from o_runtime.log_news import look_until

router = APIRouter()


def input_messages(body: SendMessageBody, run_id: str | None = None) -> list[ChatMessage]:
    """The request's input messages; ids derive from the run's when the client may retry it."""

    def message_id(i: int) -> str:
        return message_id_for(run_id, i) if run_id else new_id("message")

    if body.messages:
        created = [m for m in body.messages if isinstance(m, MessageCreateBody)]
        return [
            ChatMessage(
                id=message_id(i),
                role=m.role,
                content=m.text(),
                parts=m.parts(),
                name=m.name,
                otid=m.otid,
            )
            for i, m in enumerate(created)
        ]
    if body.input:
        return [
            ChatMessage(
                id=message_id(0),
                role="user",
                content=content_text(body.input),
                parts=content_parts(body.input),
            )
        ]
    raise HTTPException(422, "send at least one message (`messages` or `input`)")


Delivery = Literal["json", "stream", "async"]


def idempotent_run_id(
    lane: Lane, body: SendMessageBody, header: str | None, delivery: Delivery = "json"
) -> str | None:
    """The run a retried request names (idempotency.py), or None: every request is new.
    Under otids only the same request (`body`, answered by `delivery`) is a retry."""
    otids = [m.otid for m in body.messages or [] if isinstance(m, MessageCreateBody)]
    key = request_key(header, otids, request_digest(body, delivery))
    return run_id_for(lane.key, key) if key else None


# Where a run stands in the log: what a retried request needs to answer.
_KNOWN_RUN = (
    "SELECT status, stop_reason, last_seq, coalesce(started_seq, last_seq) AS first_seq"
    " FROM runs WHERE id = $1 AND agent_id = $2"
)


async def known_run(gw: Gateway, lane: Lane, run_id: str) -> dict[str, Any] | None:
    """The run as the log has it now (checked: o_runtime/reads.py), None if it never started."""
    last = await gw.eventlog.last_seq(lane.events)
    async with gw.reads.at(last, RUNS) as conn:
        row = await conn.fetchrow(_KNOWN_RUN, run_id, lane.agent_id)
    return dict(row) if row is not None else None


async def run_end(gw: Gateway, lane: Lane, run_id: str, timeout: float) -> int:
    """The stream sequence of the run's RunCompleted, once it has one."""

    def heard(msg: Msg) -> bool:
        if known_type(msg.data) != RunCompleted.type_name():
            return False
        try:
            return getattr(decode(msg.data).data, "run_id", None) == run_id
        except MalformedMessage:
            return False

    async def look() -> int | None:
        run = await known_run(gw, lane, run_id)
        if run is not None and run["stop_reason"] is not None:
            seq: int = run["last_seq"]
            return seq
        return None

    seq = await look_until(gw.eventlog.nc, lane.events, heard, look, timeout)
    if seq is None:
        raise HTTPException(504, f"run {run_id} is still going")
    return seq


def approval_answers(
    body: SendMessageBody, pending: list[dict[str, Any]]
) -> list[ApprovalDecision]:
    """The answers in the request, one per tool call id (Letta's current and older forms)."""
    out: list[ApprovalDecision] = []
    for m in body.messages or []:
        if not isinstance(m, ApprovalCreateBody):
            continue
        if m.approvals:
            for a in m.approvals:
                if a.type == "tool":
                    out.append(
                        ApprovalDecision(
                            tool_call_id=a.tool_call_id,
                            tool_return=a.text(),
                            tool_return_parts=a.parts(),
                            status=a.status,
                        )
                    )
                else:
                    out.append(
                        ApprovalDecision(
                            tool_call_id=a.tool_call_id,
                            approve=bool(a.approve),
                            reason=a.reason,
                        )
                    )
        elif m.approve is not None:
            # The older form answers every call of one approval request message.
            calls = [p for p in pending if p["message_id"] == m.approval_request_id]
            if not calls:
                raise HTTPException(
                    404, f"approval request {m.approval_request_id} is not waiting for an answer"
                )
            out += [
                ApprovalDecision(tool_call_id=p["tool_call_id"], approve=m.approve, reason=m.reason)
                for p in calls
            ]
        else:
            raise HTTPException(422, "an approval message needs `approvals` or `approve`")
    return out


# An agent and the tool calls it waits on, in one round trip (every message send
# checks both).
_AGENT_AND_PENDING = (
    "SELECT a.*, coalesce((SELECT jsonb_agg(jsonb_build_object('tool_call_id', p.tool_call_id,"
    " 'message_id', p.message_id, 'tool_name', p.tool_name) ORDER BY p.seq, p.tool_call_id)"
    " FROM pending_approvals p WHERE p.agent_id = a.id"
    " AND p.conversation_id IS NOT DISTINCT FROM $2), '[]') AS pending_approvals"
    " FROM agents a WHERE a.id = $1"
)


async def agent_and_pending(
    gw: Gateway, agent_id: str, conversation_id: str | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The agent's row and the tool calls waiting in the conversation (default: the agent's own)."""
    row = await gw.pool.fetchrow(_AGENT_AND_PENDING, agent_id, conversation_id)
    if row is None:
        raise HTTPException(404, f"Agent {agent_id} not found")
    agent = dict(row)
    pending: list[dict[str, Any]] = agent.pop("pending_approvals")
    return agent, pending


def checked_answers(body: SendMessageBody, pending: list[dict[str, Any]]) -> list[ApprovalDecision]:
    """Answers must match pending tool calls; a plain message may not skip a pending one
    (o_contracts/approval_rules.py; the executor checks every run's input again)."""
    answers = approval_answers(body, pending)
    waiting = [approval_rules.PendingCall(p["tool_call_id"], p["message_id"]) for p in pending]
    refused = approval_rules.refusal(
        [a.tool_call_id for a in answers], waiting, sends_messages=True
    )
    if refused is not None:
        raise HTTPException(refused.status, refused.detail)
    return answers


async def answered_before(
    gw: Gateway, lane: Lane, body: SendMessageBody, pending: list[dict[str, Any]]
) -> SendMessageBody:
    """A repeat of answers the agent already has (a client retrying after a cancelled or
    lost turn) goes on as Letta does: with the request's other messages, or with a
    keep-alive message, instead of being refused (approval_rules.answered_already).
    Anything else is left as it came."""
    answered = [a.tool_call_id for a in approval_answers(body, pending)] if not pending else []
    if not answered:
        return body
    rows = await gw.pool.fetch(
        "SELECT body->>'tool_call_id' AS call FROM messages WHERE agent_id = $1"
        " AND conversation_id IS NOT DISTINCT FROM $2 ORDER BY seq DESC LIMIT $3",
        lane.agent_id,
        lane.conversation_id,
        approval_rules.RECENT_MESSAGES,
    )
    if not approval_rules.answered_already(answered, [], (r["call"] for r in rows)):
        return body
    follow_up = [m for m in body.messages or [] if isinstance(m, MessageCreateBody)]
    keep_alive = MessageCreateBody(role="user", content=approval_rules.KEEP_ALIVE)
    return body.model_copy(update={"messages": follow_up or [keep_alive]})


def request_config(body: SendMessageBody) -> dict[str, Any]:
    return {
        "use_assistant_message": body.use_assistant_message,
        "assistant_message_tool_name": body.assistant_message_tool_name,
        "assistant_message_tool_kwarg": body.assistant_message_tool_kwarg,
        "include_return_message_types": body.include_return_message_types,
        # (How the run's stream shows it, also when it is followed again.)
        "stream_tokens": body.stream_tokens,
    }


def start_run(
    lane: Lane,
    body: SendMessageBody,
    background: bool = False,
    approvals: list[ApprovalDecision] | None = None,
    run_id: str | None = None,
    isolated_block_ids: list[str] | None = None,
    override_settings: dict[str, Any] | None = None,
    steer: bool = False,
    callback_url: str | None = None,
    enqueue_only: bool = False,
) -> Envelope[StartRun]:
    """The StartRun command; with `run_id` (a retryable request) its ids derive from it."""
    retryable = run_id is not None
    run_id = run_id or new_id("run")
    messages = input_messages(body, run_id if retryable else None)
    if not messages and not approvals:
        raise HTTPException(422, "send at least one message (`messages` or `input`)")
    agent_id = lane.agent_id
    cmd = StartRun(
        run_id=run_id,
        agent_id=agent_id,
        conversation_id=lane.conversation_id,
        messages=messages,
        approvals=approvals or [],
        client_tools=[t.model_dump(exclude_none=True) for t in body.client_tools or []],
        max_steps=body.max_steps,
        stream_tokens=body.stream_tokens,
        background=background or body.background,
        request_config=request_config(body),
        override_system=body.override_system,
        isolated_block_ids=isolated_block_ids or [],
        override_settings=override_settings or {},
        client_skills=[ClientSkill(**c.model_dump()) for c in body.client_skills or []],
        override_model=override_handle(body.override_model) if body.override_model else None,
        steer=steer,
        callback_url=callback_url,
        enqueue_only=enqueue_only,
    )
    return Envelope.wrap(
        cmd,
        aggregate_id=agent_id,
        producer=PRODUCER,
        correlation_id=run_id,
        id=command_id_for(run_id) if retryable else None,
    )


async def run_response(
    gw: Gateway,
    agent_type: str,
    run_id: str,
    seq: int | None,
    view: render.AssistantView = render.DEFAULT_VIEW,
    after: int | None = None,
    carried: list[run_answers.AnswerRow] | None = None,
) -> dict[str, Any]:
    """The run's reply; with `after`, only its messages past that position (what a run
    did after it took a steering message). `carried`: the run's rows as the executor's
    reply carried them (o_executor/run_answers.py), read here otherwise."""
    rows = carried
    if rows is None:
        # (`seq` is the run's end, or its last event so far: the runs projection applies both)
        await gw.visible(seq, RUNS, applies=True)
        # The run and its messages in one round trip: a row per message (one with
        # no message if it has none), the run's columns on each.
        rows = run_answers.rows_of(await gw.pool.fetch(run_answers.RUN_AND_MESSAGES, run_id, after))
    if not rows:
        raise HTTPException(500, f"run {run_id} finished but is not recorded")
    run = rows[0]
    hidden: set[str] = set()
    said = [(ChatMessage.model_validate_json(r["body"]), r) for r in rows if r["body"] is not None]

    def render_one(item: tuple[ChatMessage, Any]) -> list[dict[str, Any]]:
        m, r = item
        return render.letta_messages(
            m,
            r["created_at"],
            run_id,
            r["step_id"],
            agent_type,
            hidden,
            view,
            conversation_id=r["conversation_id"],
        )

    # One step's tool results show as one message (tool_return_groups.py).
    messages = shown(said, lambda m_r: message_key(m_r[0], run_id, m_r[1]["step_id"]), render_one)
    return {
        "messages": messages,
        "stop_reason": render.stop_reason(run["stop_reason"] or "error"),
        "usage": render.usage(run["usage"] or {}, run["step_count"], [run_id]),
        "logprobs": None,
        "turns": None,
    }


async def send(
    agent_id: str, body: SendMessageBody, gw: Gateway, streaming: bool, key: str | None
) -> Any:
    """A message to the agent's default conversation (Letta's agent-level routes): queued
    behind a run in progress."""
    return await send_in(Lane(checked_id(agent_id, "agent")), body, gw, streaming, key)


async def admit(
    gw: Gateway, command: Envelope[StartRun], policy: Concurrency
) -> bool | Literal["steer"]:
    """Decide how the run meets the runs of its conversation in flight (concurrency.py):
    True if it was admitted by this request, False if by a first try of it meanwhile
    (follow that), "steer" for the steering path. 409 (ConversationBusy) under reject."""
    if policy == "reject":
        return await admitted(gw, command) is not None
    if policy in ("interrupt", "rollback"):
        seq = await concurrency.interrupting(gw, command, policy == "rollback", queued_event)
        return seq is not None
    if policy == "steer" and command.data.steer:
        return "steer"
    return True


async def send_in(
    lane: Lane,
    body: SendMessageBody,
    gw: Gateway,
    streaming: bool,
    key: str | None,
    *,
    route_policy: Concurrency = AGENT_ROUTES,
    isolated_block_ids: list[str] | None = None,
    override_settings: dict[str, Any] | None = None,
    as_sent: SendMessageBody | None = None,
) -> Any:
    """Run the agent on `body` in the conversation `lane`, streamed or answered when done.
    (`as_sent`: the request as the client sent it, when `body` adds to it.)

    A run of the conversation in flight meets the request's concurrency policy, else
    the agent's, else `route_policy` (o_contracts/concurrency.py): Letta's
    conversation routes refuse it with 409 (a retry of the request in progress, same
    otids, follows it), its agent-level routes queue it.
    """
    if body.override_model:
        # (A provider registered through the API: read before the handle is checked.)
        await provider_registry.ensure_handle(body.override_model, gw.pool)
    run_id = idempotent_run_id(lane, as_sent or body, key, "stream" if streaming else "json")
    view = render.AssistantView.of(request_config(body))
    if sends_first(gw, lane, body, streaming, run_id, route_policy):
        response = await _sent_first(gw, lane, body, view, isolated_block_ids, override_settings)
        if response is not None:
            return response
    # An unknown agent is a 404 whatever the approvals say.
    agent, pending = await agent_and_pending(gw, lane.agent_id, lane.conversation_id)
    policy = policy_for(body.concurrency, agent.get("concurrency"), route_policy)
    gw.seen_agents.saw(
        lane.agent_id, policy_for(None, agent.get("concurrency"), "enqueue") == "enqueue"
    )
    # A background run's chunks are numbered, so that its stream can be resumed.
    numbering = Numbering() if streaming and body.background else None
    queued = False
    if run_id is not None:
        run = await known_run(gw, lane, run_id)
        if run is not None and run["status"] != "created":
            return await _answer_known(
                gw, lane, agent["agent_type"], run_id, run, streaming, view, numbering
            )
        # Admitted by a first try that may have died before sending its command: this
        # try sends it (ids derived from the run: the stream and the executor run it once).
        queued = run is not None
    # Images first: a client tool's image result is part of its answer.
    await store_images(gw, body)
    body = await answered_before(gw, lane, body, pending)
    approvals = checked_answers(body, pending)
    command = start_run(
        lane,
        body,
        approvals=approvals,
        run_id=run_id,
        isolated_block_ids=isolated_block_ids,
        override_settings=override_settings,
        # (Answers to pending calls steer nothing: no run is in flight while calls wait.)
        steer=policy == "steer" and not approvals,
    )
    if not queued:
        admission = await admit(gw, command, policy)
        if admission == "steer":
            from o_gateway.routes.steering import send_steering  # (it uses this module's)

            return await send_steering(gw, command, agent["agent_type"], streaming, view)
        if not admission:
            # Admitted by this request's first try meanwhile: follow that.
            run = await known_run(gw, lane, command.data.run_id)
            assert run is not None
            return await _answer_known(
                gw,
                lane,
                agent["agent_type"],
                command.data.run_id,
                run,
                streaming,
                view,
                numbering,
            )
    if streaming:
        return streamed(
            stream_run(
                gw,
                lane,
                agent["agent_type"],
                command.data.run_id,
                command=command,
                include_pings=body.include_pings,
                view=view,
                numbering=numbering,
            )
        )
    reply = await answered(
        gw,
        lane.commands,
        command,
        RUN_REPLY_TIMEOUT,
        f"run {command.data.run_id} is still going",
    )
    return await _run_answered(
        gw, lane, command, reply, agent["agent_type"], bool(agent.get("enable_sleeptime")), view
    )


def sends_first(
    gw: Gateway,
    lane: Lane,
    body: SendMessageBody,
    streaming: bool,
    run_id: str | None,
    route_policy: Concurrency,
) -> bool:
    """Whether the run's command may go before the agent is read (seen_agents.py): a plain
    new message (no answers to tool calls, no retry of a request) on an agent route, with no
    policy of its own, to an agent this process has read with a default that queues runs,
    answered as JSON (a stream renders as it goes: it reads the agent first)."""
    return (
        not streaming
        and run_id is None
        and route_policy == "enqueue"
        and body.concurrency is None
        and gw.seen_agents.sends_first(lane.agent_id)
        and not any(isinstance(m, ApprovalCreateBody) for m in body.messages or [])
    )


async def _sent_first(
    gw: Gateway,
    lane: Lane,
    body: SendMessageBody,
    view: render.AssistantView,
    isolated_block_ids: list[str] | None,
    override_settings: dict[str, Any] | None,
) -> dict[str, Any] | None:
    """The run, its command sent before the agent is read; the executor holds the input
    to the agent's rules and its reply says what the read would have. None: a run was in
    flight and the agent's concurrency default asks for another policy than queueing
    behind it (nothing was recorded): the caller decides the run's admission the usual
    way."""
    await store_images(gw, body)
    command = start_run(
        lane,
        body,
        isolated_block_ids=isolated_block_ids,
        override_settings=override_settings,
        enqueue_only=True,
    )
    run_id = command.data.run_id
    reply = await replied(
        gw, lane.commands, command, RUN_REPLY_TIMEOUT, f"run {run_id} is still going"
    )
    result = reply.result or {}
    if not reply.ok:
        if "concurrency" in result:
            return None  # (its read, the usual way, notes the default)
        if reply.status == 404:
            gw.seen_agents.forget(lane.agent_id)
            raise HTTPException(404, f"Agent {lane.agent_id} not found")
        raise refused(reply)
    agent_type, sleeptime_on = result.get("agent_type"), result.get("sleeptime")
    if agent_type is None or sleeptime_on is None:
        # (A reply without them: a run already finished when its command came again.)
        agent = await gw.agent_row(lane.agent_id)
        agent_type, sleeptime_on = agent["agent_type"], agent.get("enable_sleeptime")
    return await _run_answered(gw, lane, command, reply, agent_type, bool(sleeptime_on), view)


async def _run_answered(
    gw: Gateway,
    lane: Lane,
    command: Envelope[StartRun],
    reply: Reply,
    agent_type: str,
    sleeptime_on: bool,
    view: render.AssistantView,
) -> dict[str, Any]:
    """The response to a run's request, from the executor's reply."""
    run_id = command.data.run_id
    carried = run_answers.unpacked((reply.result or {}).get("response"))
    response = await run_response(gw, agent_type, run_id, reply.seq, view, carried=carried)
    if sleeptime_on:
        # Letta's usage.run_ids of a sleep-time primary: the companion runs this turn started.
        response["usage"]["run_ids"] = await sleeptime.companion_runs(
            gw, lane.agent_id, run_id, gw.settings.sleeptime_turn_wait
        )
    return response


async def _answer_known(
    gw: Gateway,
    lane: Lane,
    agent_type: str,
    run_id: str,
    run: dict[str, Any],
    streaming: bool,
    view: render.AssistantView = render.DEFAULT_VIEW,
    numbering: Numbering | None = None,
) -> Any:
    """A retry of a request the log has: answered from the run it started."""
    if streaming:
        return streamed(
            stream_run(
                gw,
                lane,
                agent_type,
                run_id,
                start_seq=run["first_seq"],
                include_pings=True,
                view=view,
                numbering=numbering,
            )
        )
    seq = run["last_seq"]
    if run["stop_reason"] is None:
        seq = await run_end(gw, lane, run_id, RUN_REPLY_TIMEOUT)
    return await run_response(gw, agent_type, run_id, seq, view)


class ConversationBusy(Exception):
    """409 with Letta's body: another run of the conversation is in progress."""

    def __init__(self, run_id: str) -> None:
        super().__init__(
            f"Cannot send a new message: Another request (run_id={run_id}) is currently"
            " being processed for this conversation. Please wait for it to complete."
        )
        self.run_id = run_id


# A conversation's run in progress, as of the checked position: one started, or
# one accepted recently (a run accepted long ago and never started lost its
# command with a gateway that died between the two; it no longer holds the
# conversation, and still runs in order if its command comes).
_ACTIVE_IN_LANE = (
    "SELECT id FROM runs WHERE agent_id = $1 AND conversation_id IS NOT DISTINCT FROM $2"
    " AND (status = 'running' OR (status = 'created' AND created_at > now() - $3::interval))"
    " ORDER BY created_at LIMIT 1"
)
ACCEPTED_HOLDS = timedelta(seconds=60)


async def admitted(gw: Gateway, command: Envelope[StartRun]) -> int | None:
    """Admit the run into its conversation if no other run is in progress there (else 409).

    The check and the run's RunQueued are one decision on the conversation's
    subject (appended with the expected last sequence), so of two requests
    racing, one is admitted and the other sees its run. Returns RunQueued's
    position; None if the run was admitted already (a retry).
    """
    cmd = command.data
    lane = cmd.lane

    async def decide(last: int) -> Envelope[Any] | None:
        async with gw.reads.at(last, RUNS) as conn:
            if await conn.fetchval("SELECT 1 FROM runs WHERE id = $1", cmd.run_id):
                return None
            active = await conn.fetchval(
                _ACTIVE_IN_LANE, lane.agent_id, lane.conversation_id, ACCEPTED_HOLDS
            )
        if active is not None:
            raise ConversationBusy(active)
        return queued_event(command)

    appended = await gw.eventlog.append_decided(lane.events, decide)
    return appended.seq if appended is not None else None


def queued_event(command: Envelope[StartRun]) -> Envelope[RunQueued]:
    cmd = command.data
    return command.caused(
        RunQueued(
            run_id=cmd.run_id,
            agent_id=cmd.agent_id,
            conversation_id=cmd.conversation_id,
            background=cmd.background,
            request_config=cmd.request_config,
            callback_url=cmd.callback_url,
        ),
        aggregate_id=cmd.agent_id,
        producer=PRODUCER,
        id=derived_id("evt", cmd.run_id, "queued"),
    )


@route(router, "POST", "/v1/agents/{agent_id}/messages")
async def send_message(
    agent_id: str, body: SendMessageBody, gw: GW, idempotency_key: IdempotencyKey = None
) -> Any:
    if (body.stream_tokens or not body.include_pings) and not body.streaming:
        raise HTTPException(422, "stream_tokens and include_pings need streaming: true")
    return await send(agent_id, body, gw, streaming=body.streaming, key=idempotency_key)


@route(router, "PATCH", "/v1/agents/{agent_id}/messages/{message_id}", deprecated=True)
async def modify_message(agent_id: str, message_id: str) -> None:
    """Letta's deprecated message edit, which its server refuses as this does: messages are
    shared by forked conversations, so none is changed in place."""
    raise HTTPException(
        405,
        "Message editing is no longer supported. Messages are immutable as they may be"
        " shared across multiple conversations via forking.",
    )


@route(router, "POST", "/v1/agents/{agent_id}/messages/stream")
async def stream_message(
    agent_id: str, body: SendMessageBody, gw: GW, idempotency_key: IdempotencyKey = None
) -> Any:
    return await send(agent_id, body, gw, streaming=True, key=idempotency_key)


@route(router, "POST", "/v1/agents/{agent_id}/messages/async")
async def send_message_async(
    agent_id: str, body: AsyncMessageBody, gw: GW, idempotency_key: IdempotencyKey = None
) -> dict[str, Any]:
    """Accept the run and return it at once (status "created"); it runs in the background,
    and its outcome is POSTed to `callback_url` when it ends (docs/callbacks.md)."""
    lane = Lane(checked_id(agent_id, "agent"))
    callback_url = accepted_callback_url(body.callback_url, gw.settings.callbacks)
    agent, pending = await agent_and_pending(gw, agent_id)
    retry_of = idempotent_run_id(lane, body, idempotency_key, "async")
    known = await known_run(gw, lane, retry_of) if retry_of is not None else None
    if retry_of is not None and known is not None and known["status"] != "created":
        return run_json(await run_row(gw, retry_of))
    await store_images(gw, body)
    sent = await answered_before(gw, lane, body, pending)
    approvals = checked_answers(sent, pending)
    command = start_run(
        lane,
        sent,
        background=True,
        approvals=approvals,
        run_id=retry_of,
        callback_url=callback_url,
    )
    seq = 0
    if known is None:
        # The run exists (and can be listed or cancelled) before the executor sees it.
        # (Under concurrency steer it queues: the answer here is the run, before it runs.)
        policy = policy_for(body.concurrency, agent.get("concurrency"), AGENT_ROUTES)
        if policy == "reject":
            seq = await admitted(gw, command) or 0
        elif policy in ("interrupt", "rollback"):
            rollback = policy == "rollback"
            seq = await concurrency.interrupting(gw, command, rollback, queued_event) or 0
        else:
            seq = (await gw.eventlog.append(lane.events, queued_event(command))).seq
    # (Again for a retry of a run still created: its first try may have died between its
    # RunQueued and this; the command's ids derive from the run, so it runs once.)
    await gw.eventlog.send_command(lane.commands, command)
    await gw.visible(seq, RUNS)
    return run_json(await run_row(gw, command.data.run_id))


@route(router, "POST", "/v1/agents/{agent_id}/messages/cancel")
async def cancel_runs(agent_id: str, gw: GW, body: CancelRunsBody | None = None) -> dict[str, str]:
    """Ask the agent's runs to stop: an LLM call in flight is abandoned, a tool call finishes."""
    await gw.agent_row(checked_id(agent_id, "agent"))
    run_ids = [checked_id(r, "run") for r in (body.run_ids or [])] if body else []
    return await cancel_in(gw, Lane(agent_id), run_ids, every_conversation=True)


async def cancel_in(
    gw: Gateway, lane: Lane, run_ids: list[str], *, every_conversation: bool = False
) -> dict[str, str]:
    """Cancel `run_ids` (none: the active runs of the conversation, or with
    `every_conversation` of the agent); 409 if there is none to cancel."""
    agent_id = lane.agent_id
    if not run_ids:
        rows = await gw.pool.fetch(
            "SELECT id FROM runs WHERE agent_id = $1 AND status = ANY($2)"
            " AND ($3 OR conversation_id IS NOT DISTINCT FROM $4)"
            " AND NOT cancel_requested ORDER BY created_at",
            agent_id,
            list(ACTIVE),
            every_conversation,
            lane.conversation_id,
        )
        run_ids = [r["id"] for r in rows]
        if not run_ids:
            raise HTTPException(409, f"No active runs found for {lane.key} to cancel")
    results: dict[str, str] = {}
    last = 0
    for run_id in run_ids:
        row = await gw.pool.fetchrow(
            "SELECT status, conversation_id FROM runs WHERE id = $1 AND agent_id = $2",
            run_id,
            agent_id,
        )
        if row is None or row["status"] not in ACTIVE:
            results[run_id] = "failed"
            continue
        event = Envelope.wrap(
            RunCancellationRequested(run_id=run_id, agent_id=agent_id),
            aggregate_id=agent_id,
            producer=PRODUCER,
            correlation_id=run_id,
        )
        # On the run's own conversation's subject, where its executor hears it.
        subject = Lane(agent_id, row["conversation_id"]).events
        appended = await gw.eventlog.append(subject, event)
        last = max(last, appended.seq)
        results[run_id] = "cancelled"
    await gw.visible(last, RUNS)
    return results


@route(router, "POST", "/v1/agents/{agent_id}/summarize")
async def summarize(agent_id: str, gw: GW, body: CompactBody | None = None) -> dict[str, Any]:
    """Summarize the agent's older messages now (they stay in the history and searchable);
    with compaction_settings.mode "all", every message in context."""
    await gw.agent_row(checked_id(agent_id, "agent"))
    return await summarize_in(gw, Lane(agent_id), compaction_mode(body))


def compaction_mode(body: CompactBody | None) -> Literal["all", "sliding_window"]:
    """Letta's compaction_settings.mode: "all" (or "self_compact_all"), else the sliding window."""
    settings = (body.compaction_settings if body else None) or {}
    mode = settings.get("mode", "sliding_window")
    known = ("all", "sliding_window", "self_compact_all", "self_compact_sliding_window")
    if mode not in known:
        raise HTTPException(422, f"compaction_settings.mode must be one of {', '.join(known)}")
    return "all" if mode in ("all", "self_compact_all") else "sliding_window"


async def summarize_in(
    gw: Gateway, lane: Lane, mode: Literal["all", "sliding_window"] = "sliding_window"
) -> dict[str, Any]:
    run_id = new_id("run")
    command = Envelope.wrap(
        StartRun(
            run_id=run_id,
            agent_id=lane.agent_id,
            conversation_id=lane.conversation_id,
            summarize=True,
            compaction_mode=mode,
        ),
        aggregate_id=lane.agent_id,
        producer=PRODUCER,
        correlation_id=run_id,
    )
    reply = await answered(
        gw, lane.commands, command, RUN_REPLY_TIMEOUT, "summarizing is still going"
    )
    result = reply.result or {}
    if result.get("stop_reason") != "end_turn":
        raise HTTPException(502, f"summarizing failed: {result.get('stop_reason')}")
    await gw.visible(reply.seq, RUNS)
    if "summary" not in result:
        count = len(await in_context_ids(gw, lane))
        return {"num_messages_before": count, "num_messages_after": count, "summary": ""}
    # Letta counts the system message among those in context; the run's count is of
    # the history it reads, which leaves the system message out.
    system = await gw.pool.fetchval(
        "SELECT count(*) FROM messages WHERE agent_id = $1 AND compiled_system"
        " AND conversation_id IS NOT DISTINCT FROM $2",
        lane.agent_id,
        lane.conversation_id,
    )
    return {
        "num_messages_before": result["num_messages_before"] + system,
        "num_messages_after": result["num_messages_after"] + system,
        "summary": result["summary"],
    }


@route(router, "GET", "/v1/agents/{agent_id}/messages")
async def list_messages(
    agent_id: str,
    gw: GW,
    before: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    order: Literal["asc", "desc"] = "desc",
    conversation_id: str | None = None,
    use_assistant_message: bool = True,
    assistant_message_tool_name: Annotated[str, Query(max_length=MAX_NAME_CHARS)] = "send_message",
    assistant_message_tool_kwarg: Annotated[str, Query(max_length=MAX_NAME_CHARS)] = "message",
    include_return_message_types: Annotated[list[MessageTypeName] | None, Query()] = None,
) -> list[dict[str, Any]]:
    """The agent's messages in all its conversations, interleaved, as Letta lists them;
    with `conversation_id`, that conversation's (Letta's "default", as Letta Code sends
    it, and the agent's own id both name the default conversation)."""
    agent = await gw.agent_row(checked_id(agent_id, "agent"))
    if conversation_id is None:
        rows = await agent_messages(gw, agent_id, before, after, limit, order)
    else:
        lane = Lane(agent_id)
        if conversation_id not in ("default", agent_id):
            lane = Lane(agent_id, checked_id(conversation_id, "conv"))
        rows = await lane_messages(gw, lane, before, after, limit, order)
    # Letta returns the chosen page in chronological order either way.
    if order == "desc":
        rows = list(reversed(rows))
    view = render.AssistantView(
        use_assistant_message, assistant_message_tool_name, assistant_message_tool_kwarg
    )
    rendered = await rendered_messages(gw, rows, agent["agent_type"], view)
    return of_types(rendered, include_return_message_types)
