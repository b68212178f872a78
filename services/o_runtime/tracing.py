"""OpenTelemetry traces that follow one user message across every service.

The trace context travels in NATS headers (W3C `traceparent`): appends and
commands inject it, consumers and projectors continue it. Spans are recorded
and exported (to the console) with `O_TRACE_CONSOLE=1`. Without an exporter no
span is recorded, since each costs CPU on every event of every projection; the
API's no-op tracer still passes a caller's trace context on from hop to hop.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

tracer = trace.get_tracer("o")


def setup_tracing(service: str, console: bool) -> None:
    """`console` (O_TRACE_CONSOLE=1): print spans; otherwise spans are not exported."""
    if not console:
        return  # nothing would export the spans: keep the no-op tracer
    provider = TracerProvider(resource=Resource.create({"service.name": f"o-{service}"}))
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    trace.set_tracer_provider(provider)


def inject(headers: dict[str, str]) -> dict[str, str]:
    """Add the current trace context to outgoing NATS headers."""
    propagate.inject(headers)
    return headers


@contextmanager
def continued(
    name: str, headers: Mapping[str, str] | None, **attributes: str | int
) -> Iterator[None]:
    """A consumer span that continues the producer's trace."""
    context = propagate.extract(dict(headers or {}))
    with tracer.start_as_current_span(
        name, context=context, kind=trace.SpanKind.CONSUMER, attributes=attributes
    ):
        yield
