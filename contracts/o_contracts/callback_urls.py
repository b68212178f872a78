"""What a completion callback's URL must look like (Letta's `callback_url`).

Checked wherever a URL enters O: the HTTP body of `POST .../messages/async` (422
naming `callback_url`), a `StartRun` published on NATS (refused and dead-lettered),
and the events that carry it. Only the form is checked here; whether O may reach
the address is the gateway's policy at delivery time (o_gateway/callbacks/policy.py),
because a host name may resolve elsewhere by then.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field

# Browsers and proxies commonly cut URLs at 2 KiB; a callback URL longer than that
# is a mistake (or an attempt to smuggle data into the log).
MAX_CALLBACK_URL_CHARS = 2048


def checked_callback_url(url: str) -> str:
    """`url` if it is an absolute http(s) URL with a host; ValueError otherwise."""
    try:
        parts = urlsplit(url)
        port = parts.port  # (raises on a port that is not a number in range)
    except ValueError as exc:
        raise ValueError(f"not a URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"must be an http:// or https:// URL, not {parts.scheme or 'none'}://")
    if not parts.hostname:
        raise ValueError("must name a host")
    if parts.username is not None or parts.password is not None:
        # Credentials in the URL would sit in the log and in every read of the run.
        raise ValueError("must not carry credentials (user:password@)")
    if port == 0:
        raise ValueError("port 0 is not a port to send to")
    if any(c.isspace() or ord(c) < 0x20 for c in url):
        raise ValueError("must not contain whitespace or control characters")
    return url


CallbackUrl = Annotated[
    str, Field(max_length=MAX_CALLBACK_URL_CHARS), AfterValidator(checked_callback_url)
]
