"""A tiny HTTP health endpoint for services that have no HTTP API of their own.

`GET /healthz` answers while the process runs (liveness); `GET /readyz`
answers 200 only while the readiness check passes (NATS and Postgres reachable).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

ReadyCheck = Callable[[], Awaitable[bool]]


async def serve_health(port: int, ready: ReadyCheck, host: str = "0.0.0.0") -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), timeout=5)
            path = request_line.split(b" ")[1] if request_line.count(b" ") >= 2 else b"/"
            if path.startswith(b"/healthz"):
                status, body = 200, b'{"status":"ok"}'
            elif path.startswith(b"/readyz"):
                ok = await ready()
                status, body = (
                    (200, b'{"status":"ready"}') if ok else (503, b'{"status":"not ready"}')
                )
            else:
                status, body = 404, b'{"detail":"not found"}'
            reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}[status]
            writer.write(
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port)
