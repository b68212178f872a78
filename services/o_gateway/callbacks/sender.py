"""One POST of a callback: resolve, check every address, connect to a checked one, bounded.

The host is resolved here, once, every address it resolves to must pass the policy, and
the request goes to one of those very addresses (o_runtime/pinned_http.py: no DNS
rebinding). httpx is used without proxies from the environment and without following
redirects (a redirect could point anywhere, unchecked), a new client per attempt.

The attempt is bounded as a whole (`timeout`, resolving included) and so is
what is read of the answer (`max_response_bytes`): a receiver that streams
forever or sends gigabytes costs O nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime

import httpx

from o_gateway.callbacks.schedule import Outcome
from o_runtime.egress_policy import TargetPolicy
from o_runtime.pinned_http import Refusal, checked

USER_AGENT = "O-Callbacks/1"


async def post(
    url: str,
    body: bytes,
    headers: Callable[[], dict[str, str]],
    policy: TargetPolicy,
    timeout: float,
    max_response_bytes: int,
) -> Outcome:
    """POST `body` to `url` (headers made just before sending: they carry the time it
    is signed at) and say what came of it. Never raises for the receiver's sake."""
    sent_at = datetime.now(UTC)
    try:
        async with asyncio.timeout(timeout):
            return await _post(url, body, headers, policy, max_response_bytes, sent_at)
    except TimeoutError:
        return Outcome(sent_at, error=f"no answer within {timeout:g} s")


async def _post(
    url: str,
    body: bytes,
    headers: Callable[[], dict[str, str]],
    policy: TargetPolicy,
    max_response_bytes: int,
    sent_at: datetime,
) -> Outcome:
    target = await checked(url, policy)
    if isinstance(target, Refusal):
        return Outcome(sent_at, error=target.reason, refused=target.refused)
    request_headers = {"User-Agent": USER_AGENT, **headers(), **target.headers}
    try:
        async with (
            httpx.AsyncClient(trust_env=False, follow_redirects=False, timeout=None) as client,
            client.stream(
                "POST",
                target.url,
                content=body,
                headers=request_headers,
                extensions=target.extensions,
            ) as response,
        ):
            read = 0
            async for chunk in response.aiter_raw():
                read += len(chunk)
                if read >= max_response_bytes:
                    break
            return Outcome(sent_at, status_code=response.status_code)
    except httpx.HTTPError as exc:
        return Outcome(sent_at, error=f"{type(exc).__name__}: {exc}"[:500])
    except OSError as exc:
        return Outcome(sent_at, error=f"{type(exc).__name__}: {exc}"[:500])
