"""Signed deliveries, as Stripe and GitHub sign their webhooks.

Every attempt carries:

- `O-Delivery-Id`: the same on every attempt of one delivery (one per run), so a
  receiver drops repeats by it;
- `O-Timestamp`: Unix seconds when the attempt was signed;
- `O-Signature`: `v1=` and the hex HMAC-SHA256, under the server's secret
  (O_CALLBACK_SECRET), of `<timestamp>.<body>`: the timestamp, a dot and the
  body's exact bytes. Signing the timestamp with the body lets a receiver refuse
  an old delivery replayed by someone who captured it (`verify`'s tolerance).

`verify` is what a receiver runs (docs/callbacks.md shows it standalone).
"""

from __future__ import annotations

import hashlib
import hmac

DELIVERY_ID_HEADER = "O-Delivery-Id"
TIMESTAMP_HEADER = "O-Timestamp"
SIGNATURE_HEADER = "O-Signature"
ATTEMPT_HEADER = "O-Attempt"
# The scheme's version: a later one can be sent beside it (`v1=... v2=...`).
SCHEME = "v1"
# How old a delivery a receiver should still accept, by default.
TOLERANCE_SECONDS = 300


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The hex HMAC-SHA256 of `<timestamp>.<body>` under `secret`."""
    signed = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def signed_headers(
    secret: str, delivery_id: str, attempt: int, timestamp: int, body: bytes
) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        DELIVERY_ID_HEADER: delivery_id,
        ATTEMPT_HEADER: str(attempt),
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: f"{SCHEME}={signature(secret, timestamp, body)}",
    }


def verify(
    secret: str,
    body: bytes,
    timestamp: str,
    signature_header: str,
    now: float,
    tolerance: float = TOLERANCE_SECONDS,
) -> bool:
    """Whether `body` with these headers was signed with `secret` within `tolerance` of
    `now` (Unix seconds). Compares in constant time."""
    try:
        signed_at = int(timestamp)
    except ValueError:
        return False
    if abs(now - signed_at) > tolerance:
        return False
    expected = signature(secret, signed_at, body)
    offered = [
        value
        for scheme, _, value in (part.partition("=") for part in signature_header.split())
        if scheme == SCHEME
    ]
    return any(hmac.compare_digest(expected, value) for value in offered)
