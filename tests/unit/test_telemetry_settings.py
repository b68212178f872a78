"""What a service exports, from OpenTelemetry's standard variables: nothing recorded unless
an exporter is configured, /metrics always, OTLP once an endpoint is set."""

from __future__ import annotations

import pytest

from o_runtime.env import BadSetting, Env
from o_runtime.telemetry_settings import TelemetrySettings


def settings(**environ: str) -> TelemetrySettings:
    return TelemetrySettings.from_env(Env(environ))


def test_with_nothing_set_no_span_is_recorded_and_prometheus_is_served() -> None:
    chosen = settings()
    assert (chosen.traces, chosen.metrics) == ((), ("prometheus",))
    assert (chosen.ready_max_projection_lag, chosen.sample_interval) == (30.0, 10.0)


def test_an_otlp_endpoint_sends_traces_and_metrics_over_http_by_default() -> None:
    chosen = settings(OTEL_EXPORTER_OTLP_ENDPOINT="http://collector:4318")
    assert chosen.traces == ("otlp",)
    assert chosen.metrics == ("prometheus", "otlp")
    assert (chosen.traces_protocol, chosen.metrics_protocol) == ("http/protobuf",) * 2


def test_a_signal_specific_endpoint_turns_on_that_signal_only() -> None:
    chosen = settings(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http://collector:4318/v1/traces")
    assert (chosen.traces, chosen.metrics) == (("otlp",), ("prometheus",))


def test_protocols_are_chosen_per_signal_or_for_both() -> None:
    chosen = settings(
        OTEL_EXPORTER_OTLP_ENDPOINT="http://collector:4317",
        OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
        OTEL_EXPORTER_OTLP_METRICS_PROTOCOL="http/protobuf",
    )
    assert (chosen.traces_protocol, chosen.metrics_protocol) == ("grpc", "http/protobuf")


def test_exporters_named_explicitly_win_over_the_endpoint() -> None:
    chosen = settings(
        OTEL_EXPORTER_OTLP_ENDPOINT="http://collector:4318",
        OTEL_TRACES_EXPORTER="none",
        OTEL_METRICS_EXPORTER="otlp, console",
    )
    assert (chosen.traces, chosen.metrics) == ((), ("otlp", "console"))


def test_the_console_switch_adds_console_spans() -> None:
    assert settings(O_TRACE_CONSOLE="1").traces == ("console",)
    both = settings(O_TRACE_CONSOLE="1", OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4318")
    assert both.traces == ("otlp", "console")


def test_the_sdk_disabled_turns_everything_off() -> None:
    chosen = settings(OTEL_SDK_DISABLED="true", OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4318")
    assert (chosen.traces, chosen.metrics) == ((), ())


def test_readiness_and_sampling_settings_are_read() -> None:
    chosen = settings(
        O_READY_MAX_PROJECTION_LAG="5", O_METRICS_SAMPLE_SECONDS="2.5", OTEL_SERVICE_NAME="x"
    )
    assert (chosen.ready_max_projection_lag, chosen.sample_interval) == (5.0, 2.5)
    assert chosen.service_name == "x"


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("OTEL_TRACES_EXPORTER", "zipkin", "OTEL_TRACES_EXPORTER takes otlp, console, none"),
        ("OTEL_METRICS_EXPORTER", "statsd", "OTEL_METRICS_EXPORTER takes prometheus"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", "is grpc or http/protobuf"),
        ("O_READY_MAX_PROJECTION_LAG", "-1", "O_READY_MAX_PROJECTION_LAG must be at least 0"),
        ("O_METRICS_SAMPLE_SECONDS", "often", "O_METRICS_SAMPLE_SECONDS must be a number"),
    ],
)
def test_a_bad_value_is_refused_with_its_name(name: str, value: str, says: str) -> None:
    with pytest.raises(BadSetting, match=says):
        settings(**{name: value})
