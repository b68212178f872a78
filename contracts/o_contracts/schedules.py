"""Scheduled runs (O's extension, issue 22): when a schedule fires, what it sends, and what
becomes of slots missed while O was down.

These are the values events and commands carry. Whether a cron expression parses and a
time zone exists is checked where schedules are made (o_schedules/slots.py), so the
contracts stay free of croniter and an old event is always readable.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field, model_validator

from o_contracts.models import ChatMessage, ContentPart, Value

# What happens to slots that passed while no scheduler could fire them (more than
# `grace_seconds` late): none of them runs, only the latest runs, or each runs (the
# latest `max_catch_up` of them; older ones are skipped). docs/schedules.md.
MissedPolicy = Literal["skip", "run_once", "run_each"]

MAX_CATCH_UP = 1000
MAX_GRACE_SECONDS = 86_400.0
MAX_SCHEDULED_MESSAGES = 100


class ScheduledMessage(Value):
    """One input message a schedule sends each time it fires (as in a message request)."""

    role: Literal["user", "system", "assistant"] = "user"
    content: str | None = None
    # Set when the message is more than text (images stored when the schedule was made).
    parts: list[ContentPart] | None = None
    name: str | None = None

    def message(self, message_id: str) -> ChatMessage:
        return ChatMessage(
            id=message_id, role=self.role, content=self.content, parts=self.parts, name=self.name
        )


class ScheduleSpec(Value):
    """A schedule: when (a cron expression in a time zone, or one instant) and what."""

    name: str | None = Field(default=None, max_length=256)
    # Five fields (minute hour day month weekday), or six with seconds first; or an alias
    # such as @hourly. Exactly one of `cron` and `at`.
    cron: str | None = Field(default=None, max_length=256)
    # A one-shot: the instant it fires (aware, as given).
    at: datetime | None = None
    # IANA name; the cron expression's fields are read in it (07:00 is 07:00 there).
    timezone: str = Field(default="UTC", max_length=64)
    messages: list[ScheduledMessage] = Field(min_length=1, max_length=MAX_SCHEDULED_MESSAGES)
    max_steps: int = Field(default=50, ge=1, le=1000)
    missed: MissedPolicy = "run_once"
    max_catch_up: int = Field(default=10, ge=1, le=MAX_CATCH_UP)
    # A slot fired within this long of its time is on time; later, it was missed.
    grace_seconds: float = Field(default=60.0, ge=0.0, le=MAX_GRACE_SECONDS)

    @model_validator(mode="after")
    def _one_kind(self) -> ScheduleSpec:
        if (self.cron is None) == (self.at is None):
            raise ValueError("a schedule has either `cron` or `at`, not both or neither")
        return self

    def timing(self) -> tuple[str | None, datetime | None, str]:
        """What decides the slots: a change to it starts them afresh from the change."""
        return (self.cron, self.at, self.timezone)


class ScheduleChanges(Value):
    """A PATCH of a schedule: only the fields given change. Giving `cron` drops `at` and
    the other way round."""

    name: str | None = Field(default=None, max_length=256)
    cron: str | None = Field(default=None, max_length=256)
    at: datetime | None = None
    timezone: str | None = Field(default=None, max_length=64)
    messages: list[ScheduledMessage] | None = Field(
        default=None, min_length=1, max_length=MAX_SCHEDULED_MESSAGES
    )
    max_steps: int | None = Field(default=None, ge=1, le=1000)
    missed: MissedPolicy | None = None
    max_catch_up: int | None = Field(default=None, ge=1, le=MAX_CATCH_UP)
    grace_seconds: float | None = Field(default=None, ge=0.0, le=MAX_GRACE_SECONDS)
    enabled: bool | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ScheduleChanges:
        if self.cron is not None and self.at is not None:
            raise ValueError("give `cron` or `at`, not both")
        return self

    def applied_to(self, spec: ScheduleSpec) -> ScheduleSpec:
        """`spec` with these changes (validated again as a whole)."""
        given = self.model_dump(exclude_none=True, exclude={"enabled"})
        # (model_dump turns parts into dicts: keep the values themselves.)
        if self.messages is not None:
            given["messages"] = self.messages
        if self.cron is not None:
            given["at"] = None
        if self.at is not None:
            given["cron"] = None
        return ScheduleSpec.model_validate(spec.model_dump() | given)
