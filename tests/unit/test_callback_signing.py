"""Signed callbacks: the signature a receiver checks, and what makes it fail."""

from __future__ import annotations

import hashlib
import hmac

from o_gateway.callbacks.signing import signature, signed_headers, verify

SECRET = "whsec-test-0123456789abcdef"
BODY = b'{"run_id":"run-1","status":"completed"}'


def test_the_signature_is_hmac_sha256_over_timestamp_dot_body() -> None:
    expected = hmac.new(SECRET.encode(), b"1700000000." + BODY, hashlib.sha256).hexdigest()
    assert signature(SECRET, 1700000000, BODY) == expected


def test_headers_carry_the_delivery_id_the_timestamp_and_a_v1_signature() -> None:
    headers = signed_headers(SECRET, "callback-1", 3, 1700000000, BODY)
    assert headers == {
        "Content-Type": "application/json",
        "O-Delivery-Id": "callback-1",
        "O-Attempt": "3",
        "O-Timestamp": "1700000000",
        "O-Signature": f"v1={signature(SECRET, 1700000000, BODY)}",
    }


def test_a_receiver_accepts_what_was_signed_with_its_secret() -> None:
    headers = signed_headers(SECRET, "callback-1", 1, 1700000000, BODY)
    assert verify(SECRET, BODY, headers["O-Timestamp"], headers["O-Signature"], now=1700000010)


def test_another_body_secret_or_timestamp_fails() -> None:
    headers = signed_headers(SECRET, "callback-1", 1, 1700000000, BODY)
    ts, sig = headers["O-Timestamp"], headers["O-Signature"]
    assert not verify(SECRET, BODY + b" ", ts, sig, now=1700000000)
    assert not verify("another-secret-0123456789", BODY, ts, sig, now=1700000000)
    # The timestamp is signed: moving it forward to pass the age check breaks the signature.
    assert not verify(SECRET, BODY, "1700000600", sig, now=1700000600)
    assert not verify(SECRET, BODY, "not a number", sig, now=1700000000)


def test_an_old_delivery_replayed_is_refused_by_its_age() -> None:
    headers = signed_headers(SECRET, "callback-1", 1, 1700000000, BODY)
    ts, sig = headers["O-Timestamp"], headers["O-Signature"]
    assert verify(SECRET, BODY, ts, sig, now=1700000300)
    assert not verify(SECRET, BODY, ts, sig, now=1700000301)


def test_one_of_several_v1_signatures_is_enough_and_other_schemes_are_ignored() -> None:
    good = signature(SECRET, 1700000000, BODY)
    assert verify(SECRET, BODY, "1700000000", f"v0={good} v1=deadbeef v1={good}", now=1700000000)
    assert not verify(SECRET, BODY, "1700000000", f"v0={good}", now=1700000000)
