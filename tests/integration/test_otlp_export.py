"""Spans and metrics leave a process over OTLP, by HTTP or gRPC as the standard variables
say, and arrive at a collector (a stand-in decoding them with opentelemetry-proto)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from o_runtime.env import Env
from o_runtime.metrics import metric_readers
from o_runtime.telemetry import resource
from o_runtime.telemetry_settings import TelemetrySettings
from o_runtime.tracing import span_processors
from tests.otlp_collector import OtlpCollector, ReceivedPoint, ReceivedSpan


@pytest.fixture(scope="module")
def collector() -> Iterator[OtlpCollector]:
    c = OtlpCollector()
    c.start()
    yield c
    c.stop()


def settings_for(collector: OtlpCollector, protocol: str) -> TelemetrySettings:
    endpoint = collector.grpc_endpoint if protocol == "grpc" else collector.http_endpoint
    return TelemetrySettings.from_env(
        Env({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": protocol})
    )


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_spans_reach_the_collector_over_either_protocol(
    collector: OtlpCollector, protocol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = settings_for(collector, protocol)
    assert settings.traces == ("otlp",) and settings.traces_protocol == protocol
    # The exporters read their endpoint from the environment themselves.
    endpoint = collector.grpc_endpoint if protocol == "grpc" else collector.http_endpoint
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    provider = TracerProvider(resource=resource("executor", settings))
    for processor in span_processors(settings):
        provider.add_span_processor(processor)
    name = f"chat over {protocol}"
    with provider.get_tracer("test").start_as_current_span(
        name, attributes={"gen_ai.usage.input_tokens": 12}
    ):
        pass
    assert provider.force_flush()

    def sent(c: OtlpCollector) -> list[ReceivedSpan]:
        return [s for s in c.spans if s.name == name]

    (span,) = collector.wait_for(sent)
    assert span.service == "o-executor"
    assert span.attributes == {"gen_ai.usage.input_tokens": 12}
    provider.shutdown()


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_metrics_reach_the_collector_over_either_protocol(
    collector: OtlpCollector, protocol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint = collector.grpc_endpoint if protocol == "grpc" else collector.http_endpoint
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    settings = TelemetrySettings.from_env(
        Env(
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
                "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
                # Prometheus' reader registers with prometheus_client's global registry.
                "OTEL_METRICS_EXPORTER": "otlp",
            }
        )
    )
    provider = MeterProvider(
        resource=Resource.create({"service.name": "o-memory"}),
        metric_readers=metric_readers(settings),
    )
    counter = provider.get_meter("o").create_counter(f"o.test.{protocol}")
    counter.add(3, {"consumer": "memory"})
    assert provider.force_flush()

    def sent(c: OtlpCollector) -> list[ReceivedPoint]:
        return [p for p in c.points if p.name == f"o.test.{protocol}"]

    (point,) = collector.wait_for(sent)
    assert (point.service, point.attributes, point.value) == ("o-memory", {"consumer": "memory"}, 3)
    provider.shutdown()
