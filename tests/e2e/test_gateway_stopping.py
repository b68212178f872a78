"""A gateway told to stop (SIGTERM: a rolling update) while a request waits for its run
answers it 503 with Retry-After once its grace is over, not a plain 500 or a cut
connection; the request sent again elsewhere follows the same run (stopping.py)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest

from o_gateway.stopping import SHUTDOWN_GRACE, STOPPING_DETAIL
from tests.e2e.conftest import System
from tests.e2e.support import another_gateway, new_agent, until
from tests.fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.e2e


async def test_a_request_still_waiting_when_its_gateway_stops_is_answered_503(
    system: System, llm: FakeOpenAI
) -> None:
    agent = await new_agent(system)
    held = threading.Event()
    llm.push(Reply(content="answered after the stop", release=held))
    body = {"messages": [{"role": "user", "content": "hello", "otid": "otid-stopping-1"}]}
    path = f"/v1/agents/{agent['id']}/messages"
    try:
        async with another_gateway(system) as (gateway, supervisor):
            waiting = asyncio.create_task(gateway.post(path, json=body))
            await until(llm, lambda requests: len(requests) == 1)
            (pid,) = supervisor.pids("gateway")
            told = time.monotonic()
            os.kill(pid, signal.SIGTERM)
            response = await waiting
            took = time.monotonic() - told
        assert response.status_code == 503, response.text
        assert response.json() == {"detail": STOPPING_DETAIL}
        assert response.headers["retry-after"] == "1"
        assert SHUTDOWN_GRACE - 0.5 < took < SHUTDOWN_GRACE + 5
        held.set()
        again = await system.http.post(path, json=body)
    finally:
        held.set()
    assert again.status_code == 200, again.text
    assert [m["content"] for m in again.json()["messages"]] == ["answered after the stop"]
    assert len(llm.requests) == 1  # the same run, followed: not run twice
