"""The DST rule (docs/schedules.md, "Daylight saving time"), on both changes of America/New_York,
Europe/London and Australia/Lord_Howe (a 30-minute shift), and a day without a midnight
(Asia/Hebron).

* A fixed-hour time in the spring-forward gap runs once, at the first instant after the gap.
* A fixed-hour time in the repeated hour runs once, at its first occurrence.
* With `*` or a step in the hour, slots follow elapsed time: gap times do not happen, both
  passes of the repeated hour run.
* From a base inside the second pass, a fixed time that ran in the first pass is not returned.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from routines.schedule import Schedule, ScheduleError, compile_schedule
from routines.spec import Kind, ScheduleSpec
from routines.spec.checks import RoutineInvalid
from routines.spec.loader import load_text


def cron(expr: str, zone: str) -> Schedule:
    return compile_schedule(ScheduleSpec(cron=expr, timezone=zone), Kind.COMMAND)


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def fires(s: Schedule, start: str, n: int) -> list[str]:
    """The next n slots after `start` (UTC) as local ISO times with their offsets."""
    return [
        x.local.isoformat()
        for x in s.slots_between(utc(start), datetime.max.replace(tzinfo=UTC), n)
    ]


# -- America/New_York: 2026-03-08 02:00 EST → 03:00 EDT; 2026-11-01 02:00 EDT → 01:00 EST --


def test_new_york_fixed_time_in_the_gap_runs_once_at_the_end_of_the_gap() -> None:
    assert fires(cron("30 2 * * *", "America/New_York"), "2026-03-07T00:00", 3) == [
        "2026-03-07T02:30:00-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-09T02:30:00-04:00",
    ]


def test_new_york_two_gap_times_and_the_gap_end_share_one_run() -> None:
    assert fires(cron("0,30 2,3 * * *", "America/New_York"), "2026-03-08T00:00", 3) == [
        "2026-03-08T03:00:00-04:00",  # 02:00, 02:30 and 03:00: one slot
        "2026-03-08T03:30:00-04:00",
        "2026-03-09T02:00:00-04:00",
    ]


def test_new_york_fixed_time_in_the_repeated_hour_runs_once() -> None:
    s = cron("30 1 * * *", "America/New_York")
    assert fires(s, "2026-10-31T00:00", 3) == [
        "2026-10-31T01:30:00-04:00",
        "2026-11-01T01:30:00-04:00",  # the first pass only
        "2026-11-02T01:30:00-05:00",
    ]
    # croniter alone fires it twice that day; a whole day holds one slot here.
    assert s.count_between(utc("2026-11-01T04:00"), utc("2026-11-02T04:00"), 10) == 1


def test_new_york_every_30_minutes_follows_elapsed_time() -> None:
    s = cron("*/30 * * * *", "America/New_York")
    assert fires(s, "2026-03-08T05:45", 4) == [
        "2026-03-08T01:00:00-05:00",
        "2026-03-08T01:30:00-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-08T03:30:00-04:00",
    ]
    assert fires(s, "2026-11-01T04:15", 6) == [
        "2026-11-01T00:30:00-04:00",
        "2026-11-01T01:00:00-04:00",
        "2026-11-01T01:30:00-04:00",
        "2026-11-01T01:00:00-05:00",
        "2026-11-01T01:30:00-05:00",
        "2026-11-01T02:00:00-05:00",
    ]


def test_new_york_base_in_the_second_pass() -> None:
    second_pass = "2026-11-01T06:10"  # 01:10 EST, the second 01:10 of the night
    fixed = cron("30 1 * * *", "America/New_York")
    assert fires(fixed, second_pass, 1) == ["2026-11-02T01:30:00-05:00"]  # not 01:30 EST today
    elapsed = cron("*/30 * * * *", "America/New_York")
    assert fires(elapsed, second_pass, 1) == ["2026-11-01T01:30:00-05:00"]
    first_pass = "2026-11-01T05:10"  # 01:10 EDT
    assert fires(fixed, first_pass, 2) == [
        "2026-11-01T01:30:00-04:00",
        "2026-11-02T01:30:00-05:00",
    ]
    assert fires(elapsed, "2026-11-01T05:45", 3) == [  # 01:45 EDT: next is 01:00 EST
        "2026-11-01T01:00:00-05:00",
        "2026-11-01T01:30:00-05:00",
        "2026-11-01T02:00:00-05:00",
    ]


# -- Europe/London: 2026-03-29 01:00 GMT → 02:00 BST; 2026-10-25 02:00 BST → 01:00 GMT --


def test_london_spring_forward() -> None:
    assert fires(cron("30 1 * * *", "Europe/London"), "2026-03-28T12:00", 2) == [
        "2026-03-29T02:00:00+01:00",
        "2026-03-30T01:30:00+01:00",
    ]
    assert fires(cron("*/30 * * * *", "Europe/London"), "2026-03-29T00:15", 3) == [
        "2026-03-29T00:30:00+00:00",
        "2026-03-29T02:00:00+01:00",
        "2026-03-29T02:30:00+01:00",
    ]


def test_london_fall_back() -> None:
    assert fires(cron("30 1 * * *", "Europe/London"), "2026-10-24T12:00", 2) == [
        "2026-10-25T01:30:00+01:00",
        "2026-10-26T01:30:00+00:00",
    ]
    assert fires(cron("*/30 * * * *", "Europe/London"), "2026-10-24T23:15", 6) == [
        "2026-10-25T00:30:00+01:00",
        "2026-10-25T01:00:00+01:00",
        "2026-10-25T01:30:00+01:00",
        "2026-10-25T01:00:00+00:00",
        "2026-10-25T01:30:00+00:00",
        "2026-10-25T02:00:00+00:00",
    ]


# -- Australia/Lord_Howe: 30 minutes. 2026-04-05 02:00 +11 → 01:30 +10:30;
#    2026-10-04 02:00 +10:30 → 02:30 +11 --


def test_lord_howe_half_hour_gap() -> None:
    assert fires(cron("15 2 * * *", "Australia/Lord_Howe"), "2026-10-02T12:00", 3) == [
        "2026-10-03T02:15:00+10:30",
        "2026-10-04T02:30:00+11:00",
        "2026-10-05T02:15:00+11:00",
    ]
    assert fires(cron("*/30 * * * *", "Australia/Lord_Howe"), "2026-10-03T14:45", 3) == [
        "2026-10-04T01:30:00+10:30",
        "2026-10-04T02:30:00+11:00",
        "2026-10-04T03:00:00+11:00",
    ]


def test_lord_howe_half_hour_repeat() -> None:
    assert fires(cron("45 1 * * *", "Australia/Lord_Howe"), "2026-04-04T00:00", 2) == [
        "2026-04-05T01:45:00+11:00",
        "2026-04-06T01:45:00+10:30",
    ]
    assert fires(cron("*/30 * * * *", "Australia/Lord_Howe"), "2026-04-04T13:45", 4) == [
        "2026-04-05T01:00:00+11:00",
        "2026-04-05T01:30:00+11:00",
        "2026-04-05T01:30:00+10:30",
        "2026-04-05T02:00:00+10:30",
    ]


# -- Asia/Hebron 2022-03-27: 00:00 +02 → 01:00 +03, no midnight that day --


def test_a_day_without_a_midnight() -> None:
    daily = cron("0 0 * * *", "Asia/Hebron")
    assert fires(daily, "2022-03-25T12:00", 3) == [
        "2022-03-26T00:00:00+02:00",
        "2022-03-27T01:00:00+03:00",  # midnight is in the gap: the first instant after it
        "2022-03-28T00:00:00+03:00",
    ]
    hourly = cron("0 * * * *", "Asia/Hebron")
    assert fires(hourly, "2022-03-26T20:30", 3) == [
        "2022-03-26T23:00:00+02:00",
        "2022-03-27T01:00:00+03:00",
        "2022-03-27T02:00:00+03:00",
    ]
    that_day = cron("30 6 27 3 *", "Asia/Hebron")
    assert fires(that_day, "2022-01-01T00:00", 1) == ["2022-03-27T06:30:00+03:00"]
    start, end = utc("2022-03-20T00:00"), utc("2022-04-03T00:00")
    assert hourly.count_between(start, end, 10**6) == len(hourly.slots_between(start, end, 10**6))


def test_slot_ids_are_utc_and_unique_through_the_repeated_hour() -> None:
    s = cron("*/30 * * * *", "America/New_York")
    slots = s.slots_between(utc("2026-11-01T04:00"), utc("2026-11-01T08:00"), 100)
    ids = [x.id for x in slots]
    assert ids == [
        "2026-11-01T04:30:00Z",
        "2026-11-01T05:00:00Z",
        "2026-11-01T05:30:00Z",
        "2026-11-01T06:00:00Z",
        "2026-11-01T06:30:00Z",
        "2026-11-01T07:00:00Z",
        "2026-11-01T07:30:00Z",
        "2026-11-01T08:00:00Z",
    ]
    assert [x.instant - y.instant for x, y in zip(slots[1:], slots, strict=False)] == [
        timedelta(minutes=30)
    ] * 7


@pytest.mark.parametrize("gone", ["US/Pacific-New", "Canada/East-Saskatchewan"])
def test_a_zone_tzdata_no_longer_has_is_an_error_never_utc(gone: str) -> None:
    with pytest.raises(ScheduleError, match=f'time zone "{gone}" is not in this machine'):
        compile_schedule(ScheduleSpec(cron="0 9 * * *", timezone=gone))
    with pytest.raises(RoutineInvalid) as exc:
        load_text(
            f'[schedule]\ncron = "0 9 * * *"\ntimezone = "{gone}"\n\n'
            '[routine]\nkind = "command"\n\n[command]\nrun = "true"\n',
            Path("gone.toml"),
        )
    assert "[schedule].timezone" in str(exc.value)


def test_an_oncalendar_zone_tzdata_no_longer_has_is_an_error() -> None:
    with pytest.raises(ScheduleError, match="not a time zone in this machine's tz database"):
        compile_schedule(ScheduleSpec(oncalendar="*-*-* 09:00 US/Pacific-New"))
