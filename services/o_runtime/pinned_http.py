"""A request to a URL someone else chose, sent only to an address the policy passed.

The host is resolved once, every address it resolves to must pass the egress policy
(egress_policy.py), and the request then goes to one of those very addresses: the URL's
host is replaced by it, while `Host` and, for https, TLS SNI and the certificate check
keep the name. So the name cannot resolve somewhere else between the check and the
connection (DNS rebinding). Callers use httpx without proxies from the environment,
without following redirects on their own (each hop is a new URL to check) and with a new
client per request: a pooled connection, keyed by address, could otherwise carry a
request for one name over TLS verified for another.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from typing import Any

import httpx

from o_runtime.egress_policy import Address, TargetPolicy, literal_address


@dataclass(frozen=True)
class Pinned:
    """A request for `url` sent to `address`: the URL to connect to, its headers and
    httpx extensions."""

    url: httpx.URL
    headers: dict[str, str]
    extensions: dict[str, Any]


@dataclass(frozen=True)
class Refusal:
    """Why nothing was sent: the policy refused an address (`refused`), or the host
    could not be resolved."""

    reason: str
    refused: bool


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


async def checked(url: str, policy: TargetPolicy) -> Pinned | Refusal:
    """Where a request for `url` may go (its host resolved and every address judged), or
    why it may not go anywhere."""
    parsed = httpx.URL(url)
    host = parsed.host
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        addresses = await resolved(host, port)
    except OSError as exc:
        return Refusal(f"could not resolve {host}: {exc.strerror or exc}", refused=False)
    if not addresses:
        return Refusal(f"{host} resolves to no address", refused=False)
    refusal = policy.addresses_refusal(host, addresses)
    if refusal is not None:
        return Refusal(refusal, refused=True)
    return pinned(url, addresses[0])
