"""A tiny HTTP server for services that have no HTTP API of their own (O_HEALTH_PORT).

- `GET /healthz`: 200 while the process runs and its event loop answers (liveness);
- `GET /readyz`: 200 while readiness.py says ready, 503 otherwise; the JSON body names
  every check and why it fails;
- `GET /metrics`: the process's metrics in Prometheus' text format (metrics.py), 404
  when metrics are off.

The gateway answers the same on its own port (o_gateway/routes/operations.py).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

from o_runtime.metrics import PROMETHEUS_CONTENT_TYPE
from o_runtime.readiness import Readiness

ReadyCheck = Callable[[], Awaitable[Readiness]]
# The exposition, or None when this process serves no metrics.
MetricsText = Callable[[], Awaitable[bytes | None]]

REASONS = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}
JSON = "application/json"


async def answer(
    path: bytes, ready: ReadyCheck, metrics: MetricsText | None
) -> tuple[int, str, bytes]:
    """Status, content type and body for a request of `path`."""
    if path.startswith(b"/healthz"):
        return 200, JSON, b'{"status":"ok"}'
    if path.startswith(b"/readyz"):
        readiness = await ready()
        return (200 if readiness.ready else 503), JSON, json.dumps(readiness.body()).encode()
    if path.startswith(b"/metrics"):
        text = await metrics() if metrics is not None else None
        if text is not None:
            return 200, PROMETHEUS_CONTENT_TYPE, text
        return 404, JSON, b'{"detail":"metrics are off (OTEL_METRICS_EXPORTER)"}'
    return 404, JSON, b'{"detail":"not found"}'


async def serve_health(
    port: int, ready: ReadyCheck, metrics: MetricsText | None = None, host: str = "0.0.0.0"
) -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), timeout=5)
            path = request_line.split(b" ")[1] if request_line.count(b" ") >= 2 else b"/"
            status, content_type, body = await answer(path, ready, metrics)
            writer.write(
                f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port)
