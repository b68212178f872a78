"""OpenTelemetry traces that follow one user message across every service.

The trace context travels in NATS headers (W3C `traceparent`): appends and
commands inject it, consumers and projectors continue it, so one user message is
one trace: the gateway's request, the executor's run with its LLM calls and tool
calls, the memory service's and the sandbox's commands, the evolution service's
reactions and every projection that applies the run's events.

Spans are exported where telemetry_settings.py says (OTLP over HTTP or gRPC, or
the console), through a batch span processor. With nowhere to export them no span
is recorded at all: each would cost CPU on every event of every projection, for
nothing. The API's no-op tracer then still passes a caller's trace context on
from hop to hop.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)

from o_runtime.telemetry_settings import TelemetrySettings

tracer = trace.get_tracer("o")

# Whether spans are recorded in this process (setup_tracing found an exporter): code that
# builds attributes only a recorded span would keep checks this first.
_recording = False


def recording() -> bool:
    return _recording


def otlp_span_exporter(protocol: str) -> SpanExporter:
    """The OTLP exporter for `protocol`; it reads its endpoint, headers etc. from the
    standard variables. (gRPC's is imported only when asked for: grpcio is heavy.)"""
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpSpanExporter,
    )

    return HttpSpanExporter()


def span_processors(settings: TelemetrySettings) -> list[SpanProcessor]:
    processors: list[SpanProcessor] = []
    if "otlp" in settings.traces:
        # Batched: a span costs the request an append to a queue, never a network call.
        processors.append(BatchSpanProcessor(otlp_span_exporter(settings.traces_protocol)))
    if "console" in settings.traces:
        processors.append(SimpleSpanProcessor(ConsoleSpanExporter()))
    return processors


def setup_tracing(resource: Resource, settings: TelemetrySettings) -> TracerProvider | None:
    """Record and export spans if `settings` name an exporter; otherwise keep the no-op
    tracer. The provider flushes what it holds when the process exits."""
    global _recording
    processors = span_processors(settings)
    if not processors:
        return None
    provider = TracerProvider(resource=resource)
    for processor in processors:
        provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    _recording = True
    return provider


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


@contextmanager
def reacting(name: str, headers: Sequence[Mapping[str, str] | None]) -> Iterator[None]:
    """A span for handling several events at once (a reactor's batch): it continues the
    trace of the one event, or links the traces of several."""
    if len(headers) == 1:
        with continued(name, headers[0], events=1):
            yield
        return
    links = []
    if _recording:
        for carrier in headers:
            context = trace.get_current_span(propagate.extract(dict(carrier or {})))
            if context.get_span_context().is_valid:
                links.append(trace.Link(context.get_span_context()))
    with tracer.start_as_current_span(
        name, kind=trace.SpanKind.CONSUMER, links=links, attributes={"events": len(headers)}
    ):
        yield
