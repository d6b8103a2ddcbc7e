"""OnCalendar parsing without systemd: the man page's normalization table, what `~` and
two-digit years mean, zones, and every refusal's text. (test_oncalendar_oracle.py holds the
evaluation against systemd-analyze.)"""

from __future__ import annotations

import pytest

from routines.schedule.error import ScheduleError
from routines.schedule.oncalendar import SHORTHANDS, parse_oncalendar

MAN = "; see `man systemd.time`"


# `man systemd.time`, "Calendar Events": the examples and their normalized forms.
@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("Sat,Thu,Mon..Wed,Sat..Sun", "Mon..Thu,Sat,Sun *-*-* 00:00:00"),
        ("Mon,Sun 12-*-* 2,1:23", "Mon,Sun 2012-*-* 01,02:23:00"),
        ("Wed *-1", "Wed *-*-01 00:00:00"),
        ("Wed..Wed,Wed *-1", "Wed *-*-01 00:00:00"),
        ("Wed, 17:48", "Wed *-*-* 17:48:00"),
        ("Wed..Sat,Tue 12-10-15 1:2:3", "Tue..Sat 2012-10-15 01:02:03"),
        ("*-*-7 0:0:0", "*-*-07 00:00:00"),
        ("10-15", "*-10-15 00:00:00"),
        ("monday *-12-* 17:00", "Mon *-12-* 17:00:00"),
        ("Mon,Fri *-*-3,1,2 *:30:45", "Mon,Fri *-*-01,02,03 *:30:45"),
        ("12,14,13,12:20,10,30", "*-*-* 12,13,14:10,20,30:00"),
        ("12..14:10,20,30", "*-*-* 12..14:10,20,30:00"),
        ("mon,fri *-1/2-1,3 *:30:45", "Mon,Fri *-01/2-01,03 *:30:45"),
        ("03-05 08:05:40", "*-03-05 08:05:40"),
        ("08:05:40", "*-*-* 08:05:40"),
        ("05:40", "*-*-* 05:40:00"),
        ("Sat,Sun 12-05 08:05:40", "Sat,Sun *-12-05 08:05:40"),
        ("Sat,Sun 08:05:40", "Sat,Sun *-*-* 08:05:40"),
        ("2003-03-05 05:40", "2003-03-05 05:40:00"),
        ("2003-02..04-05", "2003-02..04-05 00:00:00"),
        ("2003-03-05 05:40 UTC", "2003-03-05 05:40:00 UTC"),
        ("2003-03-05", "2003-03-05 00:00:00"),
        ("03-05", "*-03-05 00:00:00"),
        ("hourly", "*-*-* *:00:00"),
        ("daily", "*-*-* 00:00:00"),
        ("daily UTC", "*-*-* 00:00:00 UTC"),
        ("monthly", "*-*-01 00:00:00"),
        ("weekly", "Mon *-*-* 00:00:00"),
        ("weekly Pacific/Auckland", "Mon *-*-* 00:00:00 Pacific/Auckland"),
        ("yearly", "*-01-01 00:00:00"),
        ("annually", "*-01-01 00:00:00"),
        ("*:2/3", "*-*-* *:02/3:00"),
    ],
)
def test_the_man_pages_normalization_table(text: str, normalized: str) -> None:
    assert parse_oncalendar(text).normalized == normalized


def test_every_shorthand_is_accepted() -> None:
    for name in [*SHORTHANDS, "MINUTELY", "Quarterly"]:
        assert (
            parse_oncalendar(name).normalized
            == parse_oncalendar(SHORTHANDS[name.lower()]).normalized
        )


def test_days_counted_from_the_end_of_the_month() -> None:
    assert parse_oncalendar("*-*~01").pattern.last_days == {1}  # the last day
    assert parse_oncalendar("*-02~03").pattern.last_days == {3}  # third last of February
    assert parse_oncalendar("Mon *-05~07/1").pattern.last_days == set(range(1, 8))
    assert parse_oncalendar("*-*~07/2").pattern.last_days == {7, 5, 3, 1}
    assert parse_oncalendar("*-*~1..7/2").pattern.last_days == {1, 3, 5, 7}
    assert parse_oncalendar("*-*~*").pattern.last_days == set()  # systemd drops ~ before *


def test_years_repetitions_and_two_digit_years() -> None:
    assert parse_oncalendar("26-01-01").pattern.years == frozenset({2026})
    assert parse_oncalendar("70-01-01").pattern.years == frozenset({1970})
    years = parse_oncalendar("2026/2-*-*").pattern.years
    assert years is not None and min(years) == 2026 and max(years) == 2198 and len(years) == 87


def test_the_hour_field_decides_the_dst_rule() -> None:
    assert parse_oncalendar("*-*-* 02:30").pattern.elapsed is False
    assert parse_oncalendar("*-*-* 01..03:30").pattern.elapsed is False
    assert parse_oncalendar("*-*-* *:30").pattern.elapsed is True
    assert parse_oncalendar("*-*-* 00/2:30").pattern.elapsed is True
    assert parse_oncalendar("hourly").pattern.elapsed is True
    assert parse_oncalendar("daily").pattern.elapsed is False


def test_a_trailing_zone() -> None:
    assert parse_oncalendar("Mon 09:00 Europe/Berlin").zone == "Europe/Berlin"
    assert parse_oncalendar("daily utc").zone == "UTC"
    assert parse_oncalendar("daily Etc/UTC").zone == "Etc/UTC"
    assert parse_oncalendar("Mon..Fri 09:00").zone is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "*-*-* *:*/30:00",
            '"*:*/30:00": "*/30": a repetition needs a start value, as in "00/30" '
            "(systemd refuses */30)" + MAN,
        ),
        (
            "*-*-* */6:00:00",
            '"*/6:00:00": "*/6": a repetition needs a start value, as in "00/6" '
            "(systemd refuses */6)" + MAN,
        ),
        ("Fri..Mon", '"Fri..Mon": a weekday range must run forward, Mon..Sun' + MAN),
        ("Mon..", '"Mon..": a weekday range needs an end, as in Mon..Fri' + MAN),
        (
            "Mond 09:00",
            '"Mond": "Mond" is not a weekday: expected Mon…Sun or Monday…Sunday, in lists '
            "(Mon,Wed) or ranges (Mon..Fri)" + MAN,
        ),
        ("*-*-32", '"*-*-32": day "32" is out of range 1-31' + MAN),
        ("*-13-01", '"*-13-01": month "13" is out of range 1-12' + MAN),
        (
            "*-*~29",
            '"*-*~29": day "~29" (counted from the end of the month) is out of range 1-28' + MAN,
        ),
        (
            "*-*~1/1",
            '"*-*~1/1": day "~1/1" (counted from the end of the month) repeats past the start '
            "of the month" + MAN,
        ),
        ("*-*-5..1", '"*-*-5..1": day "5..1": the range runs backwards' + MAN),
        ("24:00", '"24:00": hour "24" is out of range 0-23' + MAN),
        ("*:50/10", '"*:50/10": minute "50/10" repeats past the end of the minute range' + MAN),
        ("2200-01-01", '"2200-01-01": year "2200" is out of range 1970-2199' + MAN),
        ("*-*-1/0", '"*-*-1/0": "1/0": a repetition must be at least 1' + MAN),
        ("*,5:00", '"*,5:00": "*,5": * stands alone, not in a list' + MAN),
        (
            "12",
            '"12": expected a date or a time (hour:minute or hour:minute:second)' + MAN,
        ),
        ("9:00 Mon", '"Mon": unexpected text after the time' + MAN),
        (
            "1-2-3-4",
            '"1-2-3-4": expected a date as year-month-day or month-day (with ~ before a day '
            "counted from the end of the month)" + MAN,
        ),
        (
            "daily Foo/Bar",
            '"Foo/Bar": not a time zone in this machine\'s tz database (names are '
            "case-sensitive)" + MAN,
        ),
        ("*:*:1.5", '"*:*:1.5": "1.5": fractions of a second are not supported' + MAN),
        (
            "@1767225600",
            '"@1767225600": one-shot @TIMESTAMP events are not supported: a routine repeats' + MAN,
        ),
        (
            "daily EST",
            '"EST": a zone abbreviation or legacy zone name depends on the machine\'s '
            'settings; write UTC or an IANA name such as "Europe/Berlin"' + MAN,
        ),
        ("", 'empty OnCalendar expression: expected something like "Mon..Fri 09:00"'),
    ],
)
def test_refusals_name_the_token(text: str, message: str) -> None:
    with pytest.raises(ScheduleError) as exc:
        parse_oncalendar(text)
    assert str(exc.value) == message
