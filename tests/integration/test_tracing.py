"""Trace context crosses NATS: what a producer appends, a consumer continues."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from o_contracts import subjects
from o_contracts.envelope import Envelope
from o_contracts.events import BlockDeleted
from o_contracts.ids import new_id
from o_runtime.eventlog import EventLog
from o_runtime.tracing import continued


async def test_an_appended_event_carries_the_trace_to_its_consumer(eventlog: EventLog) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    block_id = new_id("block")
    with tracer.start_as_current_span("request") as root:
        appended = await eventlog.append(
            subjects.block_subject(block_id),
            Envelope.wrap(BlockDeleted(block_id=block_id), aggregate_id=block_id, producer="t"),
        )
    msg = await eventlog.js.get_msg(subjects.EVENTS_STREAM, appended.seq)
    assert msg.headers is not None and "traceparent" in msg.headers
    trace.set_tracer_provider(provider)  # continued() uses the global provider
    with continued("consume", msg.headers):
        pass
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert spans["consume"].context.trace_id == root.get_span_context().trace_id
    assert spans["consume"].parent is not None
    assert spans["consume"].parent.span_id == root.get_span_context().span_id
