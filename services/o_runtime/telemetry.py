"""Setting up a service process's traces and metrics once, at start (o_runtime/service.py)."""

from __future__ import annotations

import os
import socket
from importlib import metadata

from opentelemetry.sdk.resources import Resource

from o_runtime.metrics import setup_metrics
from o_runtime.telemetry_settings import TelemetrySettings
from o_runtime.tracing import setup_tracing


def _version() -> str:
    try:
        return metadata.version("o-server")
    except metadata.PackageNotFoundError:
        return "unknown"


def resource(service: str, settings: TelemetrySettings) -> Resource:
    """Who the spans and metrics come from. `OTEL_RESOURCE_ATTRIBUTES` adds to it; every
    replica is an instance of its own (host and pid)."""
    return Resource.create(
        {
            "service.name": settings.service_name or f"o-{service}",
            "service.namespace": "o",
            "service.version": _version(),
            "service.instance.id": f"{socket.gethostname()}-{os.getpid()}",
        }
    )


def setup_telemetry(service: str, settings: TelemetrySettings) -> None:
    if not settings.traces and not settings.metrics:
        return
    described = resource(service, settings)
    setup_tracing(described, settings)
    setup_metrics(described, settings)
