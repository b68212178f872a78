"""Completion callbacks: one delivery per run that asked for one (Letta's `callback_url`).

Appended by the gateway on `o.evt.callback.<run_id>`, the delivery's own subject
(its aggregate), each with the expected last subject sequence: the subject's
history is the delivery's state (scheduled, attempts so far, delivered or
abandoned), so whoever handles it next reads it from the log and never repeats
an attempt a receiver acknowledged.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from o_contracts.base import Event
from o_contracts.callback_urls import CallbackUrl


class CallbackScheduled(Event):
    """The run ended and its outcome is to be POSTed to `url`, signed, until `deadline`."""

    run_id: str
    agent_id: str
    # Sent as the `O-Delivery-Id` header on every attempt: receivers drop repeats by it.
    delivery_id: str
    url: CallbackUrl
    # The exact JSON body every attempt sends (Letta's shape: run_id, status,
    # completed_at, metadata with the run's result), fixed once so that every attempt
    # and every replica sends the same bytes.
    body: str
    # No attempt starts after this.
    deadline: datetime


class CallbackAttempted(Event):
    """One POST of the delivery and what came of it (a 2xx, another status, or an error)."""

    run_id: str
    delivery_id: str
    # 1, 2, 3 ... (an attempt cut short by a crash is not recorded; the next one
    # takes its number and sends the same delivery id).
    attempt: int = Field(ge=1)
    sent_at: datetime
    # The receiver's HTTP status; None if none came (refused, unreachable, timed out).
    status_code: int | None = None
    error: str | None = None
    # When the next attempt is due; None: this was the last one.
    next_attempt_at: datetime | None = None


class CallbackDelivered(Event):
    """The receiver acknowledged the delivery (2xx): it is never sent again."""

    run_id: str
    delivery_id: str
    attempt: int = Field(ge=1)
    status_code: int


class CallbackAbandoned(Event):
    """No attempt will follow: the target was refused, or the retries ran out of time."""

    run_id: str
    delivery_id: str
    attempts: int = Field(ge=0)
    reason: str
