"""When a schedule's slots fall: a cron expression read in an IANA time zone, or one instant.

Pure (no I/O): the gateway checks what it is given with it, the projection keeps each
schedule's next slot with it, and the timer plans fires with it (plan.py). Slots are
instants, in UTC.

Cron expressions have five fields (minute hour day-of-month month day-of-week), or six
with seconds first (as Quartz, Spring and node-cron write them: croniter's
`second_at_beginning`), or are one of croniter's aliases (@hourly, @daily, ...). The
fields are read in the schedule's time zone: `0 7 * * *` in Europe/Paris is 07:00 in
Paris, winter and summer.

Daylight saving time, by vixie cron's rule:
- a wall time that does not exist (the hour skipped in spring) fires once, at the first
  instant after the gap;
- a wall time that happens twice (the hour repeated in autumn) fires once, the first
  time, unless the expression's hour field is a wildcard: an hourly schedule fires in
  each of the two hours, as they are two hours.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

from o_contracts.schedules import ScheduleSpec

ALIASES = frozenset(
    {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)
_TINY = timedelta(microseconds=1)


class InvalidSchedule(ValueError):
    """A schedule that cannot be: `field` names what is wrong (cron, timezone, at)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def zone(name: str) -> ZoneInfo:
    """The IANA time zone `name` (from the tzdata package, whatever the OS ships)."""
    try:
        if not name or name != name.strip():
            raise ValueError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidSchedule(
            "timezone", f"{name!r} is not an IANA time zone (such as Europe/Paris or UTC)"
        ) from None


def check_cron(expression: str) -> None:
    """InvalidSchedule("cron", ...) unless `expression` is a cron expression that fires."""
    text = expression.strip()
    if text.lower() not in ALIASES:
        fields = len(text.split())
        if fields not in (5, 6):
            raise InvalidSchedule(
                "cron",
                f"{expression!r} has {fields} fields: give five (minute hour day month"
                " weekday) or six (second minute hour day month weekday)",
            )
    try:
        valid = croniter.is_valid(text, second_at_beginning=True)
    except Exception:  # croniter raises several types for what it cannot read
        valid = False
    if not valid:
        raise InvalidSchedule("cron", f"{expression!r} is not a valid cron expression")
    try:
        croniter(text, datetime(2000, 1, 1, tzinfo=UTC), second_at_beginning=True).get_next(
            datetime
        )
    except CroniterBadDateError:
        raise InvalidSchedule("cron", f"{expression!r} never fires") from None


def check(spec: ScheduleSpec) -> None:
    """InvalidSchedule naming the field unless every slot of `spec` can be computed."""
    zone(spec.timezone)
    if spec.cron is not None:
        check_cron(spec.cron)


def check_new(spec: ScheduleSpec, now: datetime) -> None:
    """What a schedule must be when made or when its timing changes: computable, and a
    one-shot still ahead."""
    check(spec)
    if spec.at is not None and instant(spec.at, spec.timezone) <= now:
        raise InvalidSchedule("at", f"{spec.at.isoformat()} is not in the future")


def instant(value: datetime, timezone: str) -> datetime:
    """`value` as an instant in UTC; a naive value is a wall time in `timezone`."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=zone(timezone))
    return value.astimezone(UTC)


class Slots:
    """The slots of one schedule."""

    def __init__(self, spec: ScheduleSpec) -> None:
        self.tz = zone(spec.timezone)
        self.expression = spec.cron.strip() if spec.cron is not None else None
        self.at = instant(spec.at, spec.timezone) if spec.at is not None else None
        self._hourly = False
        if self.expression is not None:
            hours = croniter(self.expression, second_at_beginning=True).expanded[1]
            self._hourly = hours == ["*"] or len(hours) == 24

    def after(self, t: datetime) -> Iterator[datetime]:
        """Slots strictly after `t`, earliest first."""
        if self.at is not None:
            if self.at > t:
                yield self.at
            return
        yield from self._walk(t, forward=True)

    def at_or_before(self, t: datetime) -> Iterator[datetime]:
        """Slots at or before `t`, latest first."""
        if self.at is not None:
            if self.at <= t:
                yield self.at
            return
        yield from self._walk(t + _TINY, forward=False)

    def next_after(self, t: datetime) -> datetime | None:
        return next(self.after(t), None)

    def upcoming(self, t: datetime, count: int) -> list[datetime]:
        """The first `count` slots after `t`."""
        out: list[datetime] = []
        for slot in self.after(t):
            if len(out) >= count:
                break
            out.append(slot)
        return out

    def _walk(self, start: datetime, forward: bool) -> Iterator[datetime]:
        assert self.expression is not None
        it = croniter(
            self.expression,
            start.astimezone(self.tz),
            ret_type=datetime,
            second_at_beginning=True,
        )
        step = it.get_next if forward else it.get_prev
        previous: datetime | None = None
        while True:
            try:
                local: datetime = step()
            except CroniterBadDateError:  # none within croniter's 50 years
                return
            if self._repeated(local):
                continue
            slot = local.astimezone(UTC)
            # The slots of a skipped hour come out as its end, several times: once.
            if previous is not None and (slot <= previous if forward else slot >= previous):
                continue
            previous = slot
            yield slot

    def _repeated(self, local: datetime) -> bool:
        """The second of a wall time that happens twice, for a schedule with fixed hours."""
        if self._hourly or not local.fold:
            return False
        return local.replace(fold=0).utcoffset() != local.utcoffset()
