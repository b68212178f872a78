"""One POST of a callback: resolve, check every address, connect to a checked one, bounded.

The host is resolved here, once, and every address it resolves to must pass the
policy (policy.py); the request then goes to one of those very addresses (the
URL's host replaced by it; `Host` and, for https, TLS SNI and the certificate
check keep the name), so the name cannot resolve to somewhere else between the
check and the connection (DNS rebinding). httpx is used without proxies from the
environment and without following redirects (a redirect could point anywhere,
unchecked). A new client per attempt: a pooled connection, keyed by address,
could otherwise carry a request for one name over TLS verified for another.

The attempt is bounded as a whole (`timeout`, resolving included) and so is
what is read of the answer (`max_response_bytes`): a receiver that streams
forever or sends gigabytes costs O nothing.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

from o_gateway.callbacks.policy import Address, TargetPolicy, literal_address
from o_gateway.callbacks.schedule import Outcome

USER_AGENT = "O-Callbacks/1"


@dataclass(frozen=True)
class Pinned:
    """A request for `url` sent to `address`: the URL to connect to, its headers and
    httpx extensions."""

    url: httpx.URL
    headers: dict[str, str]
    extensions: dict[str, Any]


def pinned(url: str, address: Address) -> Pinned:
    """`url` with its host replaced by `address`; the name stays in `Host` and (https) in
    the TLS server name, so virtual hosts and certificates work as usual."""
    original = httpx.URL(url)
    target = original.copy_with(host=str(address))
    headers = {"Host": original.netloc.decode("ascii")}
    extensions: dict[str, Any] = {}
    if original.scheme == "https" and literal_address(original.host) is None:
        extensions["sni_hostname"] = original.host
    return Pinned(target, headers, extensions)


async def resolved(host: str, port: int) -> list[Address]:
    """Every address `host` resolves to (a literal address: itself)."""
    literal = literal_address(host)
    if literal is not None:
        return [literal]
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    out: list[Address] = []
    for *_, sockaddr in infos:
        address = literal_address(str(sockaddr[0]))
        if address is not None and address not in out:
            out.append(address)
    return out


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
    parsed = httpx.URL(url)
    host = parsed.host
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        addresses = await resolved(host, port)
    except OSError as exc:
        return Outcome(sent_at, error=f"could not resolve {host}: {exc.strerror or exc}")
    if not addresses:
        return Outcome(sent_at, error=f"{host} resolves to no address")
    refusal = policy.addresses_refusal(host, addresses)
    if refusal is not None:
        return Outcome(sent_at, error=refusal, refused=True)
    target = pinned(url, addresses[0])
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
