"""Descriptions written by code: the common shapes read as a person would say them, and the
uncommon ones still say exactly what runs."""

from __future__ import annotations

import pytest

from routines.schedule.cron import parse_cron
from routines.schedule.describe import describe, format_time, ordinal
from routines.schedule.oncalendar import parse_oncalendar


@pytest.mark.parametrize(
    ("cron", "text"),
    [
        # the examples
        ("0 9 * * 1-5", "Every weekday at 9:00 AM"),
        ("*/30 * * * *", "Every 30 minutes"),
        ("0 6 1 * *", "At 6:00 AM on the 1st of every month"),
        ("0 6 * * *", "Every day at 6:00 AM"),
        # intervals
        ("* * * * *", "Every minute"),
        ("*/15 * * * *", "Every 15 minutes"),
        ("7/15 * * * *", "Every 15 minutes, starting at 7 minutes past the hour"),
        ("@hourly", "Every hour"),
        ("5 * * * *", "Every hour at 5 minutes past"),
        ("1 * * * *", "Every hour at 1 minute past"),
        ("1-59/15 * * * *", "Every 15 minutes, starting at 1 minute past the hour"),
        # long runs of minutes or hours read as ranges, short ones as lists
        ("25-42 9 * * *", "Every day at minutes 25 through 42 past 9 AM"),
        (
            "0,5,25-42 1,3,9 * * *",
            "Every day at minutes 0, 5 and 25 through 42 past 1 AM, 3 AM and 9 AM",
        ),
        ("25-42 9-17 * * *", "Every day at minutes 25 through 42 past each hour from 9 AM to 5 PM"),
        (
            "0,30 1-3,9-20 * * *",
            "Every day at 0 and 30 minutes past 1 AM through 3 AM and 9 AM through 8 PM",
        ),
        ("0 0-3,9-20 * * *", "Every day on the hour, 12 AM through 3 AM and 9 AM through 8 PM"),
        ("0 */6 * * *", "Every 6 hours"),
        ("0 1-23/2 * * *", "Every 2 hours, starting at 1:00 AM"),
        ("0 9-17 * * *", "Every hour from 9:00 AM to 5:00 PM"),
        ("0 9,13,17 * * *", "Every day at 9:00 AM, 1:00 PM and 5:00 PM"),
        ("0 9,12,15,18 * * *", "Every 3 hours from 9:00 AM to 6:00 PM"),
        ("*/5 9-17 * * 1-5", "Every 5 minutes from 9:00 AM to 5:55 PM on weekdays"),
        ("*/15 * * * 6,0", "Every 15 minutes on weekends"),
        # times and days
        ("0 9,17 * * 1-5", "Every weekday at 9:00 AM and 5:00 PM"),
        ("0 0,12 * * *", "Every day at 12:00 AM and 12:00 PM"),
        ("15 3 * * 0", "Every Sunday at 3:15 AM"),
        ("@weekly", "Every Sunday at 12:00 AM"),
        ("30 8 * * 1,4", "Every Monday and Thursday at 8:30 AM"),
        ("0 6,18 * * mon,wed,fri", "Every Monday, Wednesday and Friday at 6:00 AM and 6:00 PM"),
        ("30 2 * * 2-4", "Every Tuesday through Thursday at 2:30 AM"),
        ("0 8 * 12 *", "Every day at 8:00 AM in December"),
        ("0 0 1,15 * *", "At 12:00 AM on the 1st and 15th of every month"),
        ("0 0 1-7 * *", "At 12:00 AM on the 1st through 7th of every month"),
        ("0 12 1 1,7 *", "At 12:00 PM on the 1st of January and July"),
        ("@yearly", "At 12:00 AM on January 1st"),
        ("0 12 1 JAN *", "At 12:00 PM on January 1st"),
        # the day fields
        ("0 0 1 * MON", "At 12:00 AM on the 1st of every month and on Mondays"),
        ("0 0 */2 * MON", "At 12:00 AM on odd-numbered days of every month when it is a Monday"),
        ("0 0 1-31 * MON", "Every day at 12:00 AM"),
    ],
)
def test_cron_descriptions(cron: str, text: str) -> None:
    assert describe(parse_cron(cron).pattern()) == text


@pytest.mark.parametrize(
    ("oncalendar", "text"),
    [
        ("Mon..Fri 09:00", "Every weekday at 9:00 AM"),
        ("*-*~01 9:00", "At 9:00 AM on the last day of every month"),
        ("*-*~1..3", "At 12:00 AM on the last 3 days of every month"),
        ("*-*~02 18:00", "At 6:00 PM on the 2nd-to-last day of every month"),
        ("Mon *-*-01..07 09:00", "At 9:00 AM on the first Monday of every month"),
        ("Tue *-*-08..14 09:00", "At 9:00 AM on the second Tuesday of every month"),
        ("Fri *-*~07/1 17:00", "At 5:00 PM on the last Friday of every month"),
        ("quarterly", "At 12:00 AM on the 1st of January, April, July and October"),
        ("*-02-29 12:00", "At 12:00 PM on February 29th"),
        ("2027-06-01 09:30", "At 9:30 AM on June 1st, 2027"),
        ("2026/2-*-* 9:00", "Every day at 9:00 AM in every other year from 2026"),
        ("2026..2028-*-* 9:00", "Every day at 9:00 AM from 2026 to 2028"),
        ("*:*:0/10", "Every 10 seconds"),
        ("*-*-* 9:00:30", "Every day at 9:00:30 AM"),
        ("minutely", "Every minute"),
        ("Sat,Sun 10:30", "Every Saturday and Sunday at 10:30 AM"),
        ("Mon..Fri *-*-* 8..18:00/20", "Every 20 minutes from 8:00 AM to 6:40 PM on weekdays"),
        ("*-*-* 1,3,9:5,10,20", "Every day at 5, 10 and 20 minutes past 1 AM, 3 AM and 9 AM"),
    ],
)
def test_oncalendar_descriptions(oncalendar: str, text: str) -> None:
    assert describe(parse_oncalendar(oncalendar).pattern) == text


def test_helpers() -> None:
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 31)] == [
        "1st",
        "2nd",
        "3rd",
        "4th",
        "11th",
        "12th",
        "13th",
        "21st",
        "22nd",
        "23rd",
        "31st",
    ]
    assert format_time(0, 0) == "12:00 AM"
    assert format_time(12, 5) == "12:05 PM"
    assert format_time(23, 59, 30, seconds=True) == "11:59:30 PM"
