"""Waiting for a started system to answer: what `make run`'s users, the tests and the
benchmarks do before their first request."""

from __future__ import annotations

import asyncio

import httpx


async def wait_healthy(http: httpx.AsyncClient, seconds: float = 60.0) -> None:
    """Return once the gateway answers its health check with 200 (a readiness probe, as
    an operator's would be: bounded, and checking a real answer); TimeoutError after
    `seconds`."""
    async with asyncio.timeout(seconds):
        while True:
            try:
                if (await http.get("/v1/health/")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
