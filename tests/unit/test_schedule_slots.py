"""When schedules fire (o_schedules/slots.py): cron fields read in the schedule's time zone,
seconds first in a six-field expression, daylight saving time by vixie cron's rule, one-shots,
and what is refused (naming the field)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import islice

import pytest

from o_contracts.schedules import ScheduledMessage, ScheduleSpec
from o_schedules.slots import InvalidSchedule, Slots, check_cron, check_new, instant, zone

HI = [ScheduledMessage(content="hi")]


def cron(expression: str, timezone: str = "UTC") -> Slots:
    return Slots(ScheduleSpec(cron=expression, timezone=timezone, messages=HI))


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def test_a_daily_cron_fires_at_its_wall_time_in_its_zone_winter_and_summer() -> None:
    paris = cron("0 7 * * *", "Europe/Paris")
    assert paris.upcoming(utc(2026, 1, 10), 2) == [utc(2026, 1, 10, 6), utc(2026, 1, 11, 6)]
    assert paris.upcoming(utc(2026, 7, 10), 1) == [utc(2026, 7, 10, 5)]
    assert cron("0 7 * * *", "America/New_York").upcoming(utc(2026, 1, 10), 1) == [
        utc(2026, 1, 10, 12)
    ]


def test_six_fields_put_seconds_first() -> None:
    every_other = cron("*/2 * * * * *")
    start = utc(2026, 1, 1, 12, 0, 0)
    assert every_other.upcoming(start, 3) == [start + timedelta(seconds=s) for s in (2, 4, 6)]
    assert cron("30 15 7 * * *").upcoming(start, 1) == [utc(2026, 1, 2, 7, 15, 30)]


def test_slots_are_strictly_after_the_instant_given() -> None:
    minutely = cron("* * * * *")
    assert minutely.next_after(utc(2026, 1, 1, 12, 0)) == utc(2026, 1, 1, 12, 1)
    assert minutely.next_after(utc(2026, 1, 1, 12, 0) - timedelta(microseconds=1)) == utc(
        2026, 1, 1, 12, 0
    )


def test_slots_at_or_before_go_back_from_the_instant_itself() -> None:
    minutely = cron("* * * * *")
    back = list(islice(minutely.at_or_before(utc(2026, 1, 1, 12, 0)), 3))
    assert back == [utc(2026, 1, 1, 12, 0), utc(2026, 1, 1, 11, 59), utc(2026, 1, 1, 11, 58)]


def test_a_wall_time_skipped_in_spring_fires_once_after_the_gap() -> None:
    # Europe/Paris, 2026-03-29: 02:00 jumps to 03:00 (01:00 UTC).
    assert cron("30 2 * * *", "Europe/Paris").upcoming(utc(2026, 3, 28, 12), 2) == [
        utc(2026, 3, 29, 1, 0),
        utc(2026, 3, 30, 0, 30),
    ]
    quarter_hours = cron("*/15 2 * * *", "Europe/Paris").upcoming(utc(2026, 3, 28, 12), 2)
    assert quarter_hours == [utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 0)]


def test_a_wall_time_repeated_in_autumn_fires_once_unless_the_hour_is_a_wildcard() -> None:
    # Europe/Paris, 2026-10-25: 03:00 goes back to 02:00 (01:00 UTC); 02:30 happens twice.
    daily = cron("30 2 * * *", "Europe/Paris").upcoming(utc(2026, 10, 24, 12), 2)
    assert daily == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]
    # Started inside the repeated hour, the second 02:30 is not a new slot either.
    assert cron("30 2 * * *", "Europe/Paris").next_after(utc(2026, 10, 25, 1, 10)) == utc(
        2026, 10, 26, 1, 30
    )
    hourly = cron("0 * * * *", "Europe/Paris").upcoming(utc(2026, 10, 24, 23, 30), 3)
    assert hourly == [utc(2026, 10, 25, 0), utc(2026, 10, 25, 1), utc(2026, 10, 25, 2)]


def test_a_one_shot_has_one_slot() -> None:
    at = utc(2026, 5, 1, 9)
    one = Slots(ScheduleSpec(at=at, messages=HI))
    assert one.upcoming(utc(2026, 1, 1), 3) == [at]
    assert one.next_after(at) is None
    assert list(one.at_or_before(at)) == [at]
    assert list(one.at_or_before(at - timedelta(seconds=1))) == []


def test_a_naive_one_shot_is_a_wall_time_in_its_zone() -> None:
    assert instant(datetime(2026, 1, 10, 7), "Europe/Paris") == utc(2026, 1, 10, 6)
    spec = ScheduleSpec(at=datetime(2026, 1, 10, 7), timezone="Asia/Tokyo", messages=HI)
    assert Slots(spec).next_after(utc(2026, 1, 1)) == utc(2026, 1, 9, 22)


def test_aliases_are_cron_expressions() -> None:
    assert cron("@hourly").next_after(utc(2026, 1, 1, 12, 30)) == utc(2026, 1, 1, 13)
    assert cron("@daily", "Europe/Paris").next_after(utc(2026, 1, 1, 12)) == utc(2026, 1, 1, 23)


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ("61 * * * *", "not a valid cron expression"),
        ("* * * *", "has 4 fields"),
        ("* * * * * * *", "has 7 fields"),
        ("every day", "has 2 fields"),
        ("0 0 30 2 *", "never fires"),
        ("H * * * *", "not a valid cron expression"),
        ("", "has 0 fields"),
    ],
)
def test_bad_cron_expressions_are_refused_naming_the_field(expression: str, says: str) -> None:
    with pytest.raises(InvalidSchedule) as refused:
        check_cron(expression)
    assert refused.value.field == "cron"
    assert says in refused.value.message


@pytest.mark.parametrize("name", ["Mars/Olympus", "", " UTC", "../etc/passwd", "utc+1"])
def test_unknown_time_zones_are_refused_naming_the_field(name: str) -> None:
    with pytest.raises(InvalidSchedule) as refused:
        zone(name)
    assert refused.value.field == "timezone"
    assert "not an IANA time zone" in refused.value.message


def test_a_one_shot_in_the_past_is_refused_naming_at() -> None:
    now = utc(2026, 1, 1, 12)
    with pytest.raises(InvalidSchedule) as refused:
        check_new(ScheduleSpec(at=now - timedelta(seconds=1), messages=HI), now)
    assert refused.value.field == "at"
    check_new(ScheduleSpec(at=now + timedelta(seconds=1), messages=HI), now)


def test_a_spec_has_cron_or_at() -> None:
    with pytest.raises(ValueError, match="either `cron` or `at`"):
        ScheduleSpec(messages=HI)
    with pytest.raises(ValueError, match="either `cron` or `at`"):
        ScheduleSpec(cron="* * * * *", at=utc(2030, 1, 1), messages=HI)
