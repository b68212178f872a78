"""A page fetched by O itself, from where the egress policy allows.

The URL comes from a model, which may have read it anywhere (a page, a tool's answer, a
prompt injected into either), and O fetches from inside the operator's network. So the
host is resolved and every address judged before anything is sent, the connection goes to
a checked address (o_runtime/pinned_http.py), and a redirect is a new URL judged the same
way, hop by hop, at most `max_redirects` of them. What is read is bounded (`max_bytes`; a
longer page is cut there) and so is the time (the caller's timeout).
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from o_runtime.egress_policy import TargetPolicy
from o_runtime.pinned_http import Refusal, checked

USER_AGENT = "Mozilla/5.0 (compatible; O-fetch_webpage/1)"
ACCEPT = "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5"
REDIRECTS = frozenset({301, 302, 303, 307, 308})


class FetchFailed(Exception):
    """Nothing usable came back; the message says why (for the model)."""


@dataclass(frozen=True)
class Fetched:
    url: str  # where the page was found, after redirects
    content_type: str | None
    body: bytes
    cut: bool  # longer than max_bytes: only its beginning was read


async def fetch(url: str, policy: TargetPolicy, max_bytes: int, max_redirects: int) -> Fetched:
    for _ in range(max_redirects + 1):
        if httpx.URL(url).scheme not in ("http", "https"):
            raise FetchFailed(f"{url}: only http and https addresses are fetched")
        target = await checked(url, policy)
        if isinstance(target, Refusal):
            refused = "O does not fetch from there" if target.refused else "nothing was fetched"
            raise FetchFailed(f"{url}: {target.reason} ({refused})")
        headers = {"User-Agent": USER_AGENT, "Accept": ACCEPT, **target.headers}
        try:
            async with (
                httpx.AsyncClient(trust_env=False, follow_redirects=False, timeout=None) as client,
                client.stream(
                    "GET", target.url, headers=headers, extensions=target.extensions
                ) as response,
            ):
                if response.status_code in REDIRECTS and "location" in response.headers:
                    url = str(httpx.URL(url).join(response.headers["location"]))
                    continue
                if response.status_code >= 400:
                    raise FetchFailed(f"{url} answered {response.status_code}")
                body, cut = await _read(response, max_bytes)
                return Fetched(url, response.headers.get("content-type"), body, cut)
        except httpx.HTTPError as exc:
            raise FetchFailed(f"Error fetching webpage: {type(exc).__name__}: {exc}"[:500]) from exc
        except OSError as exc:
            raise FetchFailed(f"Error fetching webpage: {exc}"[:500]) from exc
    raise FetchFailed(f"{url}: more than {max_redirects} redirects")


async def _read(response: httpx.Response, max_bytes: int) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    read = 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        read += len(chunk)
        if read > max_bytes:
            return b"".join(chunks)[:max_bytes], True
    return b"".join(chunks), False
