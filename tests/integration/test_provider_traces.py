"""Steps' provider traces on a real NATS: the bucket the setup role makes (how long and how
much it keeps), the executor's writer, and a trace too large to keep whole."""

from __future__ import annotations

import asyncio
import base64
import os
import uuid
from collections.abc import Callable

import pytest
from nats.js.api import DiscardPolicy
from nats.js.errors import KeyNotFoundError

from o_contracts import subjects
from o_contracts.models import Usage
from o_contracts.provider_traces import MAX_STORED_BYTES, ProviderTrace
from o_executor.llm import Exchange, LLMResult
from o_executor.provider_traces import TraceWriter
from o_executor.providers import Handle
from o_runtime.env import Env
from o_runtime.eventlog import EventLog
from o_setup import topology

STREAM = f"KV_{subjects.PROVIDER_TRACES_BUCKET}"
HANDLE = Handle("openai", "gpt-4o-mini")


@pytest.fixture
def tag() -> str:
    return uuid.uuid4().hex[:8]


async def stored(eventlog: EventLog, step_id: str) -> bytes:
    """The step's trace once the bucket has it (puts are not acknowledged: o_executor/
    provider_traces.py); a watch hears it."""
    bucket = await eventlog.bucket(subjects.PROVIDER_TRACES_BUCKET)
    watch = await bucket.watch(step_id)
    try:
        async with asyncio.timeout(10):
            async for entry in watch:
                if entry is not None and entry.value:
                    return entry.value
    finally:
        await watch.stop()
    raise AssertionError(f"no trace for {step_id}")


def answered(
    request: dict[str, object],
    content: str = "Hi.",
    response: Callable[[], dict[str, object]] | None = None,
) -> LLMResult:
    """A model's answer with the exchange a trace is made of (`response`: how its body is
    made, by default the answer's)."""
    return LLMResult(
        content=content,
        tool_calls=[],
        usage=Usage(prompt_tokens=3, completion_tokens=1, total_tokens=4),
        finish_reason="stop",
        exchange=Exchange(
            request, response or (lambda: {"choices": [{"message": {"content": content}}]})
        ),
    )


async def test_the_bucket_keeps_traces_as_long_and_as_much_as_configured(
    eventlog: EventLog,
) -> None:
    await topology.apply(
        eventlog.js, Env({"O_PROVIDER_TRACE_DAYS": "2", "O_PROVIDER_TRACE_MAX_MB": "32"})
    )
    try:
        config = (await eventlog.js.stream_info(STREAM)).config
        assert config.max_age == 2 * 86400 and config.max_bytes == 32 * 1024 * 1024
        # Full, it forgets the oldest (a key-value bucket's own policy refuses new keys).
        assert config.discard == DiscardPolicy.OLD
    finally:
        await topology.apply(eventlog.js, Env({}))
    config = (await eventlog.js.stream_info(STREAM)).config
    assert config.max_age == 7 * 86400 and config.max_bytes == 1024 * 1024 * 1024


async def test_a_step_trace_is_written_and_read_back(eventlog: EventLog, tag: str) -> None:
    await topology.apply(eventlog.js, Env({}))
    writer = await TraceWriter.open(eventlog.nc, enabled=True)
    step_id = f"step-{tag}"
    request = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hello"}]}
    writer.write(step_id, f"run-{tag}", f"agent-{tag}", HANDLE, answered(request))
    await writer.flush()
    trace = ProviderTrace.decode(await stored(eventlog, step_id))
    assert (trace.step_id, trace.run_id, trace.agent_id) == (step_id, f"run-{tag}", f"agent-{tag}")
    assert trace.request_json == request
    assert trace.response_json == {"choices": [{"message": {"content": "Hi."}}]}
    assert trace.llm_config["handle"] == "openai/gpt-4o-mini"
    assert writer.dropped == 0


async def test_a_trace_that_cannot_be_built_is_dropped_and_counted(
    eventlog: EventLog, tag: str
) -> None:
    await topology.apply(eventlog.js, Env({}))
    writer = await TraceWriter.open(eventlog.nc, enabled=True)

    def broken() -> dict[str, object]:
        raise ValueError("no response body")

    writer.write(
        f"step-{tag}", f"run-{tag}", f"agent-{tag}", HANDLE, answered({"x": 1}, response=broken)
    )
    await writer.flush()
    assert writer.dropped == 1


async def test_a_trace_too_large_keeps_its_response_and_the_requests_size(
    eventlog: EventLog, tag: str
) -> None:
    await topology.apply(eventlog.js, Env({}))
    writer = await TraceWriter.open(eventlog.nc, enabled=True)
    # An image the size of a NATS message, which compression cannot shrink.
    picture = base64.b64encode(os.urandom(MAX_STORED_BYTES)).decode()
    request = {"messages": [{"role": "user", "content": [{"type": "image_url", "url": picture}]}]}
    writer.write(f"step-{tag}", f"run-{tag}", f"agent-{tag}", HANDLE, answered(request))
    await writer.flush()
    value = await stored(eventlog, f"step-{tag}")
    assert len(value) <= MAX_STORED_BYTES
    trace = ProviderTrace.decode(value)
    assert trace.request_json["omitted"] == "too large to keep as a trace"
    assert trace.request_json["compressed_bytes"] > MAX_STORED_BYTES
    assert trace.response_json == {"choices": [{"message": {"content": "Hi."}}]}


async def test_traces_off_write_nothing(eventlog: EventLog, tag: str) -> None:
    await topology.apply(eventlog.js, Env({}))
    off = await TraceWriter.open(eventlog.nc, enabled=False)
    assert not off.enabled
    off.write(f"step-{tag}-off", f"run-{tag}", f"agent-{tag}", HANDLE, answered({"x": 1}))
    await off.flush()
    # A trace written after it on the same connection is stored after it would have been.
    on = await TraceWriter.open(eventlog.nc, enabled=True)
    on.write(f"step-{tag}-on", f"run-{tag}", f"agent-{tag}", HANDLE, answered({"x": 2}))
    await on.flush()
    await stored(eventlog, f"step-{tag}-on")
    with pytest.raises(KeyNotFoundError):
        await (await eventlog.bucket(subjects.PROVIDER_TRACES_BUCKET)).get(f"step-{tag}-off")
