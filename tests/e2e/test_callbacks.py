"""Completion callbacks (Letta's callback_url; docs/callbacks.md), against the real system.

A local receiver on 127.0.0.1 (allowed by O_CALLBACK_ALLOWED_TARGETS in the test system's
environment) gets each run's outcome once, signed; failures are retried with the same
delivery id; a gateway killed mid-delivery sends it at most once more and never loses it;
addresses inside the network are refused.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import nats
import pytest

from o_contracts import subjects
from o_contracts.commands import DeliverCallback, StartRun, callback_command_id
from o_contracts.envelope import Envelope, decode
from o_contracts.ids import new_id
from o_contracts.models import ChatMessage
from o_devtools.health import wait_healthy
from tests.e2e.callback_receiver import CALLBACK_SECRET, Received, receiving
from tests.e2e.conftest import System
from tests.e2e.support import (
    connected,
    event_types,
    last_command,
    new_agent,
    publish_again,
    until,
)
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.servers import operator

pytestmark = pytest.mark.e2e
DEADLINE = 30.0


async def send_async(system: System, agent_id: str, text: str, **extra: Any) -> dict[str, Any]:
    response = await system.http.post(
        f"/v1/agents/{agent_id}/messages/async",
        json={"messages": [{"role": "user", "content": text}], **extra},
    )
    assert response.status_code == 200, response.text
    run: dict[str, Any] = response.json()
    return run


async def run_once(
    system: System, run_id: str, done: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """The run as GET /v1/runs/{id} shows it, once `done` holds (the read model catches up
    with the log asynchronously)."""
    async with asyncio.timeout(DEADLINE):
        while True:
            response = await system.http.get(f"/v1/runs/{run_id}")
            # (A run started over NATS is listed from its RunStarted on.)
            run: dict[str, Any] = response.json()
            if response.status_code == 200 and done(run):
                return run
            await asyncio.sleep(0.05)


def answered(run: dict[str, Any]) -> bool:
    return run["callback_status_code"] is not None or run["callback_error"] is not None


async def callback_events(system: System, run_id: str) -> list[str]:
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        return [t for _, t in await event_types(nc, subjects.callback_subject(run_id))]
    finally:
        await nc.close()


def signed_correctly(got: Received) -> bool:
    """The check a receiver makes (docs/callbacks.md), written out independently."""
    timestamp = got.headers["O-Timestamp"]
    expected = hmac.new(
        CALLBACK_SECRET.encode(), timestamp.encode() + b"." + got.body, hashlib.sha256
    ).hexdigest()
    offered = got.headers["O-Signature"].removeprefix("v1=")
    fresh = abs(time.time() - int(timestamp)) < 300
    return fresh and hmac.compare_digest(expected, offered)


async def test_a_finished_run_is_posted_once_signed_with_its_final_state(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    llm.push(Reply(content="called back"))
    with receiving() as receiver:
        run = await send_async(system, agent["id"], "call me back", callback_url=receiver.url)
        assert run["callback_url"] == receiver.url
        assert run["callback_sent_at"] is None
        (got,) = await asyncio.to_thread(receiver.wait_for, 1)
        final = await run_once(system, run["id"], answered)
        assert await callback_events(system, run["id"]) == [
            "CallbackScheduled",
            "CallbackAttempted",
            "CallbackDelivered",
        ]
        assert len(receiver.received) == 1
    assert signed_correctly(got)
    assert got.headers["Content-Type"] == "application/json"
    assert got.headers["O-Attempt"] == "1"
    assert got.delivery_id.startswith("callback-")
    body = got.json()
    messages = (await system.http.get(f"/v1/runs/{run['id']}/messages")).json()
    # Letta's shape: the run's outcome, its messages as the run lists them.
    assert body == {
        "run_id": run["id"],
        "status": "completed",
        "completed_at": final["completed_at"],
        "metadata": {
            "run_type": "send_message_async",
            "result": {
                "messages": messages,
                "stop_reason": {"message_type": "stop_reason", "stop_reason": "end_turn"},
                "usage": body["metadata"]["result"]["usage"],
                "logprobs": None,
                "turns": None,
            },
        },
    }
    assert [m["message_type"] for m in messages] == ["user_message", "assistant_message"]
    assert messages[1]["content"] == "called back"
    assert body["metadata"]["result"]["usage"]["run_ids"] == [run["id"]]
    assert final["callback_status_code"] == 200
    assert final["callback_error"] is None
    assert final["callback_sent_at"] is not None
    assert final["callback_url"] == receiver.url


async def test_the_executor_asks_for_a_callback_as_the_run_ends_and_once_if_asked_twice(
    system: System, llm: FakeOpenAI
) -> None:
    # The executor that ends the run sends DeliverCallback (under an id derived from the
    # run) before it acks the run's StartRun: one that dies in between gets the command
    # back, finds the run finished and asks again, which delivers nothing twice.
    agent = await new_agent(system)
    llm.push(Reply(content="once"))
    starts = subjects.executor_command_subject(agent["id"])
    with receiving() as receiver:
        run = await send_async(system, agent["id"], "hi", callback_url=receiver.url)
        await asyncio.to_thread(receiver.wait_for, 1)
        await run_once(system, run["id"], answered)
        async with connected(system) as nc:
            js = nc.jetstream()
            asked = await js.get_last_msg(
                subjects.COMMANDS_STREAM, subjects.callback_command_subject(run["id"])
            )
            start = await last_command(nc, starts)
            delivery = await callback_events(system, run["id"])
            again = await publish_again(nc, starts, start)
            asked_after = await js.get_last_msg(
                subjects.COMMANDS_STREAM, subjects.callback_command_subject(run["id"])
            )
        assert len(receiver.received) == 1
    command = decode(asked.data or b"")
    assert command.producer == "executor" and command.id == callback_command_id(run["id"])
    assert command.data == DeliverCallback(
        run_id=run["id"], agent_id=agent["id"], completed_seq=command.data.completed_seq
    )
    assert again.ok and again.result == {"stop_reason": "end_turn"}
    assert asked_after.seq == asked.seq  # asked again under the same id: deduplicated
    assert await callback_events(system, run["id"]) == delivery


async def test_a_failed_run_is_posted_as_failed_with_its_error(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    llm.push(Reply(status=401, error_message="bad key"))
    with receiving() as receiver:
        run = await send_async(system, agent["id"], "fail please", callback_url=receiver.url)
        (got,) = await asyncio.to_thread(receiver.wait_for, 1)
    body = got.json()
    assert signed_correctly(got)
    assert (body["run_id"], body["status"]) == (run["id"], "failed")
    assert body["metadata"]["result"]["stop_reason"]["stop_reason"] == "llm_api_error"
    assert "bad key" in body["metadata"]["error"]


async def test_a_cancelled_run_is_posted_as_cancelled(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    held = threading.Event()
    llm.push(Reply(content="never seen", release=held))
    try:
        with receiving() as receiver:
            run = await send_async(system, agent["id"], "stop me", callback_url=receiver.url)
            await until(llm, lambda reqs: len(reqs) == 1)
            cancelled = await system.http.post(
                f"/v1/agents/{agent['id']}/messages/cancel", json={"run_ids": [run["id"]]}
            )
            assert cancelled.json() == {run["id"]: "cancelled"}
            (got,) = await asyncio.to_thread(receiver.wait_for, 1)
    finally:
        held.set()
    body = got.json()
    assert (body["run_id"], body["status"]) == (run["id"], "cancelled")
    assert body["metadata"]["result"]["stop_reason"]["stop_reason"] == "cancelled"


async def test_a_receiver_failing_twice_gets_three_attempts_of_one_delivery(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    llm.push(Reply(content="third time lucky"))
    with receiving(statuses=[500, 500, 200]) as receiver:
        run = await send_async(system, agent["id"], "retry me", callback_url=receiver.url)
        attempts = await asyncio.to_thread(receiver.wait_for, 3)
        final = await run_once(system, run["id"], lambda r: r["callback_status_code"] == 200)
        assert await callback_events(system, run["id"]) == [
            "CallbackScheduled",
            "CallbackAttempted",
            "CallbackAttempted",
            "CallbackAttempted",
            "CallbackDelivered",
        ]
        assert len(receiver.received) == 3
    assert len({a.delivery_id for a in attempts}) == 1
    assert [a.headers["O-Attempt"] for a in attempts] == ["1", "2", "3"]
    assert all(signed_correctly(a) for a in attempts)
    # Every attempt sends the same body (only the timestamp and signature move).
    assert len({a.body for a in attempts}) == 1
    assert final["callback_error"] is None


async def kill_gateway(system: System) -> None:
    restarts = system.supervisor.restart_count("gateway")
    (pid,) = system.supervisor.pids("gateway")
    os.kill(pid, signal.SIGKILL)
    await asyncio.wait_for(system.supervisor.wait_for_restarts("gateway", restarts + 1), DEADLINE)
    await wait_healthy(system.http)


async def test_a_gateway_killed_mid_delivery_sends_it_again_once_never_losing_it(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    llm.push(Reply(content="survives the kill"))
    held = threading.Event()
    with receiving(hold_first=held) as receiver:
        run = await send_async(system, agent["id"], "deliver me", callback_url=receiver.url)
        # The first POST reached the receiver, which holds its answer: kill the sender now.
        (first,) = await asyncio.to_thread(receiver.wait_for, 1)
        await kill_gateway(system)
        held.set()
        # The restarted gateway takes the delivery over (its predecessor is gone: no wait for
        # O_CALLBACK_ACK_WAIT, 30 s) and sends it.
        both = await asyncio.to_thread(receiver.wait_for, 2)
        final = await run_once(system, run["id"], lambda r: r["callback_status_code"] == 200)
        assert await callback_events(system, run["id"]) == [
            "CallbackScheduled",
            "CallbackAttempted",
            "CallbackDelivered",
        ]
        assert len(receiver.received) == 2
    assert both[1].delivery_id == first.delivery_id
    assert both[1].body == first.body
    assert signed_correctly(both[1])
    assert final["callback_error"] is None


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "http://169.254.169.254/latest/meta-data/",
            "callback_url is refused: 169.254.169.254 is a cloud metadata address,"
            " not a public address",
        ),
        (
            "http://10.0.0.1:8080/hook",
            "callback_url is refused: 10.0.0.1 is private, not a public address",
        ),
        (
            "http://localhost:9/hook",
            "callback_url is refused: localhost is a name inside this network",
        ),
        ("ftp://x", "must be an http:// or https:// URL, not ftp://"),
        ("not a url", "must be an http:// or https:// URL"),
        ("https://user:secret@hooks.example.com/", "must not carry credentials"),
    ],
)
async def test_a_callback_url_inside_the_network_or_not_http_is_a_422_naming_it(
    system: System, url: str, message: str
) -> None:
    agent = await new_agent(system)
    response = await system.http.post(
        f"/v1/agents/{agent['id']}/messages/async",
        json={"messages": [{"role": "user", "content": "hi"}], "callback_url": url},
    )
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "callback_url"]
    assert message in error["msg"]
    runs = (await system.http.get("/v1/runs/", params={"agent_id": agent["id"]})).json()
    assert runs == []


async def start_over_nats(system: System, agent_id: str, callback_url: str) -> str:
    """A run started by another system over NATS, with a callback_url (StartRun's field)."""
    run_id = new_id("run")
    command = Envelope.wrap(
        StartRun(
            run_id=run_id,
            agent_id=agent_id,
            messages=[ChatMessage(id=new_id("message"), role="user", content="over NATS")],
            callback_url=callback_url,
        ),
        aggregate_id=agent_id,
        producer="partner-system",
    )
    nc = await nats.connect(system.env["NATS_URL"], **operator())
    try:
        await nc.jetstream().publish(
            subjects.executor_command_subject(agent_id),
            command.encode(),
            stream=subjects.COMMANDS_STREAM,
            headers={"Nats-Msg-Id": command.id},
        )
    finally:
        await nc.close()
    return run_id


async def test_a_run_started_over_nats_is_called_back_too(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    llm.push(Reply(content="hello partner"))
    with receiving() as receiver:
        run_id = await start_over_nats(system, agent["id"], receiver.url)
        (got,) = await asyncio.to_thread(receiver.wait_for, 1)
    assert signed_correctly(got)
    assert (got.json()["run_id"], got.json()["status"]) == (run_id, "completed")
    final = await run_once(system, run_id, answered)
    assert (final["callback_url"], final["callback_status_code"]) == (receiver.url, 200)


@pytest.mark.parametrize(
    ("url", "refusal"),
    [
        (
            "http://169.254.169.254/latest/meta-data/",
            "refused: 169.254.169.254 is a cloud metadata address, not a public address",
        ),
        ("http://10.0.0.1:8080/hook", "refused: 10.0.0.1 is private, not a public address"),
    ],
)
async def test_a_callback_inside_the_network_from_nats_is_refused_and_recorded(
    system: System, llm: FakeOpenAI, url: str, refusal: str
) -> None:
    agent = await new_agent(system)
    llm.push(Reply(content="nobody hears this"))
    run_id = await start_over_nats(system, agent["id"], url)
    final = await run_once(system, run_id, answered)
    assert final["callback_error"] == refusal
    assert (final["callback_status_code"], final["callback_sent_at"]) == (None, None)
    # Nothing was sent: the delivery was abandoned before any attempt.
    assert await callback_events(system, run_id) == ["CallbackScheduled", "CallbackAbandoned"]


async def test_a_run_without_a_callback_url_shows_none(system: System, llm: FakeOpenAI) -> None:
    agent = await new_agent(system)
    llm.push(Reply(content="no call"))
    run = await send_async(system, agent["id"], "quietly")
    final = await run_once(system, run["id"], lambda r: r["status"] == "completed")
    assert {k: v for k, v in final.items() if k.startswith("callback_")} == {
        "callback_url": None,
        "callback_sent_at": None,
        "callback_status_code": None,
        "callback_error": None,
    }
    assert await callback_events(system, run["id"]) == []
