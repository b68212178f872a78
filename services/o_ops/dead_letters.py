"""`python -m o_ops dead-letters list|show ID|redrive ID`.

`redrive` moves a dead-lettered command back: it publishes the original bytes on the
subject they came from (under a Nats-Msg-Id of its own, so concurrent redrives of one
dead letter are one message), waits for the handler's answer (the command carries
`O-Reply-To`, as the gateway's commands do), and removes the dead letter. A dead letter
redriven already is gone: asked again, `redrive` says so and sends nothing. What may be
redriven and why: dead_letter_records.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from o_contracts import subjects
from o_ops.connections import operator_log
from o_ops.dead_letter_records import (
    REDRIVEN_FROM,
    DeadLetter,
    NotRedrivable,
    read,
    redrive_msg_id,
    redrive_target,
    shown_body,
)
from o_ops.settings import OpsSettings
from o_ops.tables import table
from o_runtime.commands import REPLY_HEADER, decode_reply
from o_runtime.eventlog import EventLog

STREAM = subjects.DEAD_LETTER_STREAM


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("dead-letters", help="list, show and redrive dead letters")
    verbs = parser.add_subparsers(dest="verb", required=True)
    listing = verbs.add_parser("list", help="every dead letter kept, oldest first")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(run=run_list)
    show = verbs.add_parser("show", help="one dead letter: headers and decoded body")
    show.add_argument("id", type=int)
    show.set_defaults(run=run_show)
    redrive = verbs.add_parser("redrive", help="send a dead-lettered command again, once")
    redrive.add_argument("id", type=int)
    redrive.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for the handler's answer"
    )
    redrive.set_defaults(run=run_redrive)


async def letters(js: JetStreamContext) -> AsyncIterator[tuple[DeadLetter, bytes]]:
    """Every dead letter kept, in stream order (one stored-message get each)."""
    seq = 1
    while True:
        try:
            msg = await js.get_msg(STREAM, seq=seq, subject=subjects.ALL_DEAD_LETTERS, next=True)
        except NotFoundError:
            return
        data = msg.data or b""
        yield read(msg.seq or seq, msg.subject or "", data, msg.headers, msg.time), data
        seq = (msg.seq or seq) + 1


async def letter(js: JetStreamContext, id: int) -> tuple[DeadLetter, bytes] | None:
    try:
        msg = await js.get_msg(STREAM, seq=id)
    except NotFoundError:
        return None
    data = msg.data or b""
    return read(id, msg.subject or "", data, msg.headers, msg.time), data


def gone(id: int) -> str:
    return f"no dead letter {id} in {STREAM}: redriven already, aged out (30 days) or never there"


async def run_list(args: argparse.Namespace, settings: OpsSettings) -> int:
    async with operator_log(settings) as eventlog:
        found = [dl async for dl, _ in letters(eventlog.js)]
    if args.json:
        print(json.dumps([dl.summary() for dl in found], indent=2))
        return 0
    if not found:
        print("No dead letters.")
        return 0
    print(
        table(
            ["id", "time", "consumer", "type", "from", "reason"],
            [
                [
                    dl.id,
                    dl.time.strftime("%Y-%m-%d %H:%M:%SZ") if dl.time else "",
                    dl.consumer,
                    dl.type or "?",
                    f"{dl.origin_subject} #{dl.origin_seq}",
                    dl.reason if len(dl.reason) <= 80 else dl.reason[:77] + "...",
                ]
                for dl in found
            ],
        )
    )
    return 0


async def run_show(args: argparse.Namespace, settings: OpsSettings) -> int:
    async with operator_log(settings) as eventlog:
        found = await letter(eventlog.js, args.id)
    if found is None:
        print(gone(args.id))
        return 1
    dl, data = found
    print(json.dumps(dl.summary() | {"body": shown_body(data)}, indent=2, default=str))
    return 0


async def run_redrive(args: argparse.Namespace, settings: OpsSettings) -> int:
    async with operator_log(settings) as eventlog:
        return await redrive(eventlog, args.id, args.timeout)


async def redrive(eventlog: EventLog, id: int, timeout: float) -> int:
    found = await letter(eventlog.js, id)
    if found is None:
        print(gone(id))
        return 1
    dl, data = found
    try:
        target = redrive_target(dl)
    except NotRedrivable as exc:
        print(exc)
        return 1
    answers: asyncio.Queue[Msg] = asyncio.Queue()

    async def answered(msg: Msg) -> None:
        answers.put_nowait(msg)

    inbox = eventlog.nc.new_inbox()
    sub = await eventlog.nc.subscribe(inbox, cb=answered)
    try:
        ack = await eventlog.js.publish(
            target,
            data,
            stream=subjects.COMMANDS_STREAM,
            headers={
                "Nats-Msg-Id": redrive_msg_id(dl),
                REDRIVEN_FROM: str(dl.id),
                REPLY_HEADER: inbox,
            },
        )
        # Removed only once the command is back in its stream: a redrive cut short before
        # this is simply run again (its Nats-Msg-Id keeps it one message).
        with contextlib.suppress(NotFoundError):
            await eventlog.js.delete_msg(STREAM, dl.id)
        what = f"dead letter {dl.id} ({dl.type or 'unknown type'}, {dl.consumer})"
        if ack.duplicate:
            print(f"{what} was redriven already as command seq {ack.seq}; removed from {STREAM}")
            return 0
        print(f"{what} sent again on {target} as command seq {ack.seq}")
        try:
            msg = await asyncio.wait_for(answers.get(), timeout)
        except TimeoutError:
            print(f"no answer within {timeout:g}s: the command waits for its service")
            return 0
        reply = decode_reply(msg.data)
        if reply.ok:
            print(f"done: {json.dumps(reply.result, default=str) if reply.result else 'ok'}")
            return 0
        print(f"refused ({reply.status}): {reply.error}")
        return 1
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
