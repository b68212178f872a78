"""A run as Letta's SSE stream: its recorded events and token deltas, as chunks.

The route (routes/messages.py) decides whether a request streams; this module
follows the run and frames what it sends. What deltas sent and what recorded
messages still add is deltas.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgpack
from fastapi.responses import StreamingResponse
from nats.js.api import ConsumerConfig, DeliverPolicy

from o_contracts import subjects
from o_contracts.base import Reply
from o_contracts.commands import StartRun
from o_contracts.envelope import Envelope, MalformedMessage, decode
from o_contracts.events import LLMResponded, RunCompleted, RunStarted, RunSteered, ToolReturned
from o_contracts.models import ChatMessage, answers_message
from o_contracts.ordering import position
from o_contracts.projection_names import RUNS
from o_contracts.subjects import Lane
from o_gateway import render
from o_gateway.deltas import RunDeltas, TokenDelta
from o_gateway.state import Gateway
from o_gateway.tool_return_groups import StreamedReturns
from o_runtime.commands import AwaitedReply, decode_reply, send_for_reply
from o_runtime.eventlog import SHORT_LIVED_CONSUMER
from o_runtime.waiting import ProjectionLag

log = logging.getLogger(__name__)

# A run may take many LLM steps; past this the client gets 504 (or, streaming, a
# timeout error chunk) but the run goes on and its messages appear in the history.
RUN_REPLY_TIMEOUT = 600.0


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event: a chunk as JSON (or text, as "[DONE]"), with its event name."""
    payload = data if isinstance(data, str) else json.dumps(data)
    return (f"event: {event}\n" if event else "").encode() + f"data: {payload}\n\n".encode()


def streamed(chunks: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(
        chunks,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _error(run_id: str, error_type: str, message: str) -> dict[str, Any]:
    return {
        "message_type": "error_message",
        "run_id": run_id,
        "error_type": error_type,
        "message": message,
    }


def _refusal(run_id: str, reply: Reply) -> dict[str, Any]:
    """A refused run's end in its stream: the HTTP API's status and detail, as the JSON route
    would answer them (commands.refused)."""
    detail = (reply.result or {}).get("detail") or reply.error or "rejected"
    message = detail if isinstance(detail, str) else str(detail.get("message") or reply.error)
    return _error(run_id, "refused", message) | {"status": reply.status, "detail": detail}


def _heard_reply(inbox: asyncio.Queue[tuple[str, Any]], future: asyncio.Future[bytes]) -> None:
    if not future.cancelled():
        inbox.put_nowait(("reply", future.result()))


@dataclass
class Numbering:
    """The seq_ids of a background run's chunks, and where a resumed stream starts.

    Letta numbers every chunk of a background run 1, 2, 3... and a client that reconnects
    (POST /v1/runs/{id}/stream) asks for those after the last it saw (`starting_after`).
    O numbers what the log holds of the run, in log order: each API message rendered from
    a recorded message, then the error (if any), stop reason and usage. Any gateway that
    reads the run's events numbers them alike, so a client may reconnect to another one.
    Token deltas are not in the log: they carry no seq_id; the recorded message they
    preview does (deltas.py sends what they left out, or an empty piece, under it).
    """

    starting_after: int = 0
    last: int = 0

    def next(self) -> int | None:
        """The next chunk's seq_id, None if the client already has it."""
        self.last += 1
        return self.last if self.last > self.starting_after else None


async def _follow(
    gw: Gateway, subject: str, start_seq: int | None, cb: Callable[[Any], Awaitable[None]]
) -> Any:
    """An ordered consumer of a conversation's events: new ones, or from `start_seq`."""
    if start_seq is None:
        return await gw.eventlog.js.subscribe(
            subject,
            stream=subjects.EVENTS_STREAM,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.NEW,
            inactive_threshold=SHORT_LIVED_CONSUMER,
            cb=cb,
        )
    return await gw.eventlog.js.subscribe(
        subject,
        stream=subjects.EVENTS_STREAM,
        ordered_consumer=True,
        config=ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=start_seq,
            inactive_threshold=SHORT_LIVED_CONSUMER,
        ),
        cb=cb,
    )


async def _answered_calls(gw: Gateway, lane: Lane, started_seq: int) -> list[str]:
    """The calls a run's answers to an approval request carry out (those answered and
    those held with them): the calls of the conversation's last model answer before
    the run (its RunStarted at `started_seq`), if it asked for approval."""
    body = await gw.pool.fetchval(
        "SELECT body FROM messages WHERE agent_id = $1 AND conversation_id IS NOT DISTINCT"
        " FROM $2 AND role = 'assistant' AND seq < $3 ORDER BY seq DESC LIMIT 1",
        lane.agent_id,
        lane.conversation_id,
        position(started_seq),
    )
    if body is None:
        return []
    request = ChatMessage.model_validate(body)
    return [c.id for c in request.tool_calls] if request.approval_request else []


async def stream_run(
    gw: Gateway,
    lane: Lane,
    agent_type: str,
    run_id: str,
    *,
    command: Envelope[StartRun] | None = None,
    start_seq: int | None = None,
    include_pings: bool = True,
    view: render.AssistantView = render.DEFAULT_VIEW,
    numbering: Numbering | None = None,
    steered_into: str | None = None,
) -> AsyncIterator[bytes]:
    """Follow the run's events on its conversation's subject and send them as Letta chunks.

    The ordered consumer (and, with stream_tokens, the token subscription) is
    created before `command` is sent, so nothing of the run can be missed; a
    run that is already in the log (a retried request) is read from its first
    event, `start_seq`. Token deltas arrive on core NATS: each chunk repeats
    its message's id and carries only new text; the recorded LLMResponded
    completes whatever a lost delta left out (deltas.py). A client that goes
    away does not cancel the run. With `numbering` (a background run) the chunks
    carry seq_ids, and those the client already has are left out.

    With `steered_into` (concurrency steer: `run_id` asked that run to take its
    messages), what that run does once it took them is sent, as its own; if it
    ends without taking them, `run_id` runs them and is followed instead.
    """
    # The run whose events are sent, and whether they are sent yet.
    following = steered_into or run_id
    sending = steered_into is None
    inbox: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    async def on_event(msg: Any) -> None:
        await inbox.put(("event", msg))

    async def on_tokens(msg: Any) -> None:
        await inbox.put(("tokens", msg))

    events = await _follow(gw, lane.events, start_seq, on_event)
    tokens = (
        await gw.eventlog.nc.subscribe(subjects.run_tokens_subject(run_id), cb=on_tokens)
        if command is not None and command.data.stream_tokens
        else None
    )
    deltas = RunDeltas(run_id, agent_type)
    hidden: set[str] = set()
    # A step's tool results go out together, as one message (tool_return_groups.py);
    # token deltas of the next answer that come before them wait behind them.
    results = StreamedReturns()
    kept_deltas: list[dict[str, Any]] = []

    def release(flushed: list[dict[str, Any]]) -> Iterator[bytes]:
        """Results now sent (numbered, as recorded chunks), then the deltas they held back."""
        for chunk in recorded(flushed):
            yield sse(chunk)
        if not results.awaiting():
            for chunk in kept_deltas:
                yield sse(chunk)
            kept_deltas.clear()

    def recorded(
        chunks: list[dict[str, Any]], message: ChatMessage | None = None
    ) -> Iterator[dict[str, Any]]:
        """What to send of chunks the log holds: those of a recorded `message` less what
        its deltas sent; numbered, those the client has left out."""
        if numbering is None:
            yield from deltas.on_recorded(message, chunks) if message is not None else chunks
            return
        for chunk in chunks:
            seq_id = numbering.next()
            if seq_id is None:
                continue
            if message is not None:
                sent = deltas.on_recorded(message, [chunk])
                # An empty piece still carries the seq_id: the client has it all.
                chunk = sent[0] if sent else deltas.nothing_new(chunk)
            yield chunk | {"seq_id": seq_id}

    def shown(message: ChatMessage, at: datetime, step_id: str | None) -> list[dict[str, Any]]:
        """A recorded message of the run followed, as the client sees it."""
        return render.letta_messages(
            message,
            at,
            following,
            step_id,
            agent_type,
            hidden,
            view,
            conversation_id=lane.conversation_id,
        )

    def answered(event: LLMResponded, at: datetime) -> Iterator[bytes]:
        """A step's answer as recorded (less what its deltas sent); its tool calls'
        results are then awaited."""
        for chunk in recorded(shown(event.message, at, event.step_id), event.message):
            yield sse(chunk)
        results.expect(event.message, event.step_id)

    loop = asyncio.get_running_loop()
    deadline = loop.time() + RUN_REPLY_TIMEOUT
    awaited: AwaitedReply | None = None
    try:
        if command is not None:
            # Its reply is heard too: a run the executor refuses records nothing, so only
            # its reply says so (the conversation changed after the gateway's checks).
            awaited = await send_for_reply(gw.eventlog, lane.commands, command)
            awaited.future.add_done_callback(lambda f: _heard_reply(inbox, f))
        while True:
            remaining = deadline - loop.time()
            try:
                kind, msg = await asyncio.wait_for(
                    inbox.get(), min(gw.settings.stream_ping_seconds, remaining)
                )
            except TimeoutError:
                if loop.time() < deadline:
                    if include_pings:
                        yield sse({"message_type": "ping"})
                    continue
                yield sse(_error(run_id, "timeout", "the run did not finish in time"), "error")
                break
            if kind == "reply":
                reply = decode_reply(msg)
                if reply.ok:
                    continue  # (the run's events say the rest)
                yield sse(_refusal(run_id, reply), "error")
                break
            if kind == "tokens":
                chunk = deltas.on_delta(TokenDelta.from_wire(msgpack.unpackb(msg.data, raw=False)))
                if chunk is None:
                    continue
                if results.awaiting():
                    # (A delta can overtake the step's last results: core NATS and the
                    # log are not ordered with each other.)
                    kept_deltas.append(chunk)
                    continue
                # The model speaks again: the step before has run all its tools.
                for piece in release(results.flush()):
                    yield piece
                yield sse(chunk)
                continue
            try:
                env = decode(msg.data)
            except MalformedMessage:
                continue
            event = env.data
            if not sending:
                if getattr(event, "run_id", None) != following:
                    continue
                if isinstance(event, RunSteered) and run_id in event.steer_run_ids:
                    sending = True  # (what the run does from here answers the request)
                elif isinstance(event, RunCompleted):
                    following, sending = run_id, True  # not taken: its own run runs it
                continue
            if getattr(event, "run_id", None) != following:
                continue
            if isinstance(event, ToolReturned):
                message = event.message
                chunks = shown(message, env.time, event.step_id)
                now = results.add(event.step_id, message.tool_call_id or message.id, chunks)
                for piece in release(now):
                    yield piece
                continue
            if isinstance(event, RunStarted | LLMResponded | RunCompleted):
                # Whatever the run does next ends the step whose results are held.
                for piece in release(results.flush()):
                    yield piece
            if isinstance(event, RunStarted) and event.approvals:
                started = msg.metadata.sequence.stream
                results.expect_answers(await _answered_calls(gw, lane, started))
            if (
                isinstance(event, RunStarted)
                and event.approvals
                and not event.request_config.get("stream_tokens")
            ):
                # The answers the run opened with, first, as Letta's step stream has them
                # (its token stream leaves them out).
                answers = answers_message(following, event.approvals)
                for chunk in recorded(shown(answers, env.time, None)):
                    yield sse(chunk)
            elif isinstance(event, LLMResponded):
                for piece in answered(event, env.time):
                    yield piece
            elif isinstance(event, RunCompleted):
                if event.answer is not None:
                    # The answer that ended the run, recorded with its end: shown as its
                    # own LLMResponded would have been, just before the end.
                    for piece in answered(event.answer, env.time):
                        yield piece
                    for piece in release(results.flush()):
                        yield piece
                # Read your writes, as for a plain POST: once the stream ends, the
                # run's messages and the agent's state are there to read.
                try:
                    await gw.visible(msg.metadata.sequence.stream, RUNS)
                except ProjectionLag as exc:  # the stream still ends; the reads catch up
                    log.warning("run %s streamed before it was readable: %s", following, exc)
                ending = [
                    render.stop_reason(event.stop_reason),
                    render.usage(event.usage, event.step_count, [following]),
                ]
                if event.error and event.stop_reason != "end_turn":
                    ending.insert(0, _error(following, event.stop_reason, event.error))
                for chunk in recorded(ending):
                    is_error = chunk["message_type"] == "error_message"
                    yield sse(chunk, event="error" if is_error else None)
                break
        yield sse("[DONE]")
    finally:
        if awaited is not None:
            awaited.close()
        for sub in (events, tokens):
            if sub is not None:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
