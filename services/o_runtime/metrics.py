"""OpenTelemetry metrics: read by Prometheus at `/metrics`, and pushed over OTLP when configured.

The instruments (o_runtime/instruments.py) are created on the API's global meter
provider; once setup_metrics has set the SDK's provider they record for real, until
then (and in tests that set nothing up) they do nothing. Prometheus' reader collects
when `/metrics` is scraped; an OTLP reader exports every
`OTEL_METRIC_EXPORT_INTERVAL` ms (60 s by default) from a thread of its own.
"""

from __future__ import annotations

from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from o_runtime.telemetry_settings import TelemetrySettings

PROMETHEUS_CONTENT_TYPE = CONTENT_TYPE_LATEST

# Whether this process serves /metrics (setup_metrics with the Prometheus reader).
_serving = False


def serving() -> bool:
    return _serving


def otlp_metric_exporter(protocol: str) -> MetricExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter()
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpMetricExporter,
    )

    return HttpMetricExporter()


def metric_readers(settings: TelemetrySettings) -> list[MetricReader]:
    readers: list[MetricReader] = []
    if "prometheus" in settings.metrics:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader

        readers.append(PrometheusMetricReader())
    if "otlp" in settings.metrics:
        readers.append(
            PeriodicExportingMetricReader(otlp_metric_exporter(settings.metrics_protocol))
        )
    if "console" in settings.metrics:
        readers.append(PeriodicExportingMetricReader(ConsoleMetricExporter()))
    return readers


def setup_metrics(resource: Resource, settings: TelemetrySettings) -> MeterProvider | None:
    global _serving
    readers = metric_readers(settings)
    if not readers:
        return None
    provider = MeterProvider(resource=resource, metric_readers=readers)
    metrics.set_meter_provider(provider)
    _serving = "prometheus" in settings.metrics
    return provider


def prometheus_text() -> bytes:
    """Every metric of this process in Prometheus' text format (O's instruments, and
    prometheus_client's process and runtime collectors: CPU, memory, file descriptors, GC)."""
    return generate_latest(REGISTRY)
