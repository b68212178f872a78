"""What counts as an outage (retried, never dead-lettered; 503 at the gateway) and what not."""

from __future__ import annotations

import asyncpg
import nats.errors
import nats.js.errors
import pytest

from o_runtime.outages import is_outage


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionRefusedError(111, "Connection refused"),
        TimeoutError(),
        asyncpg.CannotConnectNowError("the database system is in recovery mode"),
        asyncpg.InterfaceError("connection is closed"),
        asyncpg.InternalClientError("cannot switch to state 12; another operation is in progress"),
        nats.errors.ConnectionClosedError(),
        nats.errors.NoRespondersError(),
        nats.js.errors.BadRequestError(
            code=400, err_code=10026, description="maximum consumers limit reached"
        ),
    ],
)
def test_outages(exc: Exception) -> None:
    assert is_outage(exc)


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("a bug"),
        asyncpg.InterfaceError("another operation is in progress"),
        asyncpg.DataError("invalid byte sequence"),
        nats.js.errors.BadRequestError(code=400, err_code=10071, description="wrong last sequence"),
    ],
)
def test_not_outages(exc: Exception) -> None:
    assert not is_outage(exc)
