"""What a service exports (traces, metrics) and when it calls itself ready, from the environment.

Traces and metrics follow OpenTelemetry's standard variables, so an operator's usual
collector settings work unchanged:

- `OTEL_TRACES_EXPORTER` (`otlp`, `console`, `none`, comma-separated): unset, traces go
  over OTLP once an OTLP endpoint is set (`OTEL_EXPORTER_OTLP_ENDPOINT` or
  `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), and nowhere otherwise. With nowhere to go no span
  is recorded at all (the API's no-op tracer): a span costs CPU on every event of every
  projection. `O_TRACE_CONSOLE=1` (O's older switch) adds `console`.
- `OTEL_METRICS_EXPORTER` (`prometheus`, `otlp`, `console`, `none`): unset, Prometheus'
  `/metrics` is always served, and OTLP is added once an OTLP endpoint is set.
- `OTEL_EXPORTER_OTLP_PROTOCOL` (or `..._TRACES_PROTOCOL`, `..._METRICS_PROTOCOL`):
  `http/protobuf` (the specification's default) or `grpc`.
- `OTEL_SDK_DISABLED=true` turns everything off.

The exporters read the rest themselves (endpoint, headers, timeout, compression,
certificates; `OTEL_BSP_*` for the batch span processor, `OTEL_METRIC_EXPORT_INTERVAL`,
`OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`).
"""

from __future__ import annotations

from dataclasses import dataclass

from o_runtime.env import BadSetting, Env

PROTOCOLS = ("http/protobuf", "grpc")
TRACE_EXPORTERS = ("otlp", "console")
METRIC_EXPORTERS = ("prometheus", "otlp", "console")


def _exporters(env: Env, name: str, known: tuple[str, ...]) -> tuple[str, ...] | None:
    """The exporters a variable names (None: the variable is unset)."""
    raw = env.optional(name)
    if raw is None:
        return None
    chosen = [part.strip().lower() for part in raw.split(",") if part.strip()]
    for part in chosen:
        if part != "none" and part not in known:
            raise BadSetting(f"{name} takes {', '.join((*known, 'none'))}, not {part!r}")
    return () if "none" in chosen else tuple(dict.fromkeys(chosen))


def _protocol(env: Env, signal: str) -> str:
    name = f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL"
    raw = env.optional(name) or env.optional("OTEL_EXPORTER_OTLP_PROTOCOL") or PROTOCOLS[0]
    if raw not in PROTOCOLS:
        raise BadSetting(f"{name} (or OTEL_EXPORTER_OTLP_PROTOCOL) is grpc or http/protobuf")
    return raw


def _otlp_endpoint(env: Env, signal: str) -> bool:
    return bool(
        env.optional("OTEL_EXPORTER_OTLP_ENDPOINT")
        or env.optional(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT")
    )


@dataclass(frozen=True)
class TelemetrySettings:
    # Where spans go; empty: none is recorded.
    traces: tuple[str, ...] = ()
    # Where metrics go; "prometheus" is the /metrics endpoint.
    metrics: tuple[str, ...] = ("prometheus",)
    traces_protocol: str = PROTOCOLS[0]
    metrics_protocol: str = PROTOCOLS[0]
    # `service.name` of the resource; unset: o-<service> (OTEL_SERVICE_NAME overrides).
    service_name: str | None = None
    # Readiness is false while a projection this service keeps has left an event
    # unapplied for longer than this (seconds).
    ready_max_projection_lag: float = 30.0
    # How often consumer lags, projection lags and dead letters are sampled for the
    # metrics (a scrape of /metrics samples them afresh too).
    sample_interval: float = 10.0

    @classmethod
    def from_env(cls, env: Env) -> TelemetrySettings:
        ready_lag = env.number("O_READY_MAX_PROJECTION_LAG", 30.0, minimum=0.0)
        sample = env.number("O_METRICS_SAMPLE_SECONDS", 10.0, minimum=0.1)
        if env.flag("OTEL_SDK_DISABLED"):
            return cls((), (), ready_max_projection_lag=ready_lag, sample_interval=sample)
        traces = _exporters(env, "OTEL_TRACES_EXPORTER", TRACE_EXPORTERS)
        if traces is None:
            traces = ("otlp",) if _otlp_endpoint(env, "TRACES") else ()
        if env.flag("O_TRACE_CONSOLE") and "console" not in traces:
            traces = (*traces, "console")
        metrics = _exporters(env, "OTEL_METRICS_EXPORTER", METRIC_EXPORTERS)
        if metrics is None:
            metrics = ("prometheus", "otlp") if _otlp_endpoint(env, "METRICS") else ("prometheus",)
        return cls(
            traces=traces,
            metrics=metrics,
            traces_protocol=_protocol(env, "TRACES"),
            metrics_protocol=_protocol(env, "METRICS"),
            service_name=env.optional("OTEL_SERVICE_NAME"),
            ready_max_projection_lag=ready_lag,
            sample_interval=sample,
        )
