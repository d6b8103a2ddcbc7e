"""Plain-language schedules: each accepted phrase, the cron it resolves to and how it reads
back; refusals name what is wrong and offer the closest accepted phrases, never a guess."""

from __future__ import annotations

import calendar
from datetime import UTC, datetime
from pathlib import Path

import pytest

from routines.schedule import compile_schedule
from routines.schedule.error import ScheduleError
from routines.schedule.every import EXAMPLES, resolve_every
from routines.spec import Kind, ScheduleSpec
from tests.helpers import COMMAND, problems_of, write


@pytest.mark.parametrize(
    ("phrase", "cron", "description"),
    [
        ("every weekday at 9:00", "0 9 * * 1-5", "Every weekday at 9:00 AM"),
        ("every friday at 17:30", "30 17 * * 5", "Every Friday at 5:30 PM"),
        ("every morning", "0 8 * * *", "Every day at 8:00 AM"),
        ("every 2 hours", "0 */2 * * *", "Every 2 hours"),
        ("every 30 minutes", "*/30 * * * *", "Every 30 minutes"),
        ("daily at 7:30", "30 7 * * *", "Every day at 7:30 AM"),
        ("every day at 6pm", "0 18 * * *", "Every day at 6:00 PM"),
        ("every monday and thursday at 8am", "0 8 * * 1,4", "Every Monday and Thursday at 8:00 AM"),
        ("every month on the 1st at 9:00", "0 9 1 * *", "At 9:00 AM on the 1st of every month"),
        ("monthly on the 15th at 18:00", "0 18 15 * *", "At 6:00 PM on the 15th of every month"),
        ("every month on the first", "0 0 1 * *", "At 12:00 AM on the 1st of every month"),
        ("every hour", "0 * * * *", "Every hour"),
        ("hourly", "0 * * * *", "Every hour"),
        ("every 1 hour", "0 * * * *", "Every hour"),
        ("every minute", "* * * * *", "Every minute"),
        ("every 15 minutes on weekdays", "*/15 * * * 1-5", "Every 15 minutes on weekdays"),
        ("every hour on weekends", "0 * * * 0,6", "Every hour on weekends"),
        ("every weekend at 10am", "0 10 * * 0,6", "Every Saturday and Sunday at 10:00 AM"),
        ("every weekday morning", "0 8 * * 1-5", "Every weekday at 8:00 AM"),
        ("every sunday evening", "0 18 * * 0", "Every Sunday at 6:00 PM"),
        ("every day at noon", "0 12 * * *", "Every day at 12:00 PM"),
        ("every day at midnight", "0 0 * * *", "Every day at 12:00 AM"),
        ("every night", "0 21 * * *", "Every day at 9:00 PM"),
        ("every afternoon", "0 14 * * *", "Every day at 2:00 PM"),
        ("every day at 12am", "0 0 * * *", "Every day at 12:00 AM"),
        ("every day at 12pm", "0 12 * * *", "Every day at 12:00 PM"),
        ("every day at 9:00 and 17:00", "0 9,17 * * *", "Every day at 9:00 AM and 5:00 PM"),
        ("every mon, wed and fri at 7:15", "15 7 * * 1,3,5", None),
        ("on weekdays at 9", "0 9 * * 1-5", "Every weekday at 9:00 AM"),
        ("Every Day At 6:30 p.m.", "30 18 * * *", "Every day at 6:30 PM"),
        ("  every   day at 9 am. ", "0 9 * * *", "Every day at 9:00 AM"),
        ("every tuesdays at 07:05", "5 7 * * 2", "Every Tuesday at 7:05 AM"),
    ],
)
def test_accepted_phrases(phrase: str, cron: str, description: str | None) -> None:
    assert resolve_every(phrase) == cron
    schedule = compile_schedule(ScheduleSpec(every=phrase, timezone="UTC"), Kind.COMMAND)
    assert schedule.cron == cron
    if description is not None:
        assert schedule.description == description


def test_every_documented_example_is_accepted() -> None:
    for phrase in EXAMPLES:
        resolve_every(phrase)


@pytest.mark.parametrize(
    ("phrase", "reason", "closest"),
    [
        (
            "every 45 minutes",
            "every 45 minutes does not divide the hour evenly, so the gaps could not all be 45 "
            "minutes; the nearest that do: every 30 minutes (the steps that divide the hour: 1, "
            '2, 3, 4, 5, 6, 10, 12, 15, 20, 30), or oncalendar = "*:00/45", which runs at :00 '
            "and :45 each hour",
            "every 30 minutes",
        ),
        (
            # The oncalendar it suggests is this step's, never another's (*:00/45 for 7).
            "every 7 minutes",
            "every 7 minutes does not divide the hour evenly, so the gaps could not all be 7 "
            "minutes; the nearest that do: every 6 or every 10 minutes (the steps that divide "
            'the hour: 1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30), or oncalendar = "*:00/7", which '
            "runs at :00, :07 … :56 each hour",
            "every 30 minutes",
        ),
        (
            "every 5 hours",
            "every 5 hours does not divide the day evenly; choose one of 1, 2, 3, 4, 6, 8, 12",
            "every 2 hours",
        ),
        (
            "every day",
            'say when, as in "every day at 9:00" or "every weekday morning"',
            "every day at 6pm",
        ),
        (
            "every other day",
            'expected a day (day, weekday, weekend, monday…), found "other"',
            "every day at 6pm",
        ),
        (
            "every day at 9:15 and 17:30",
            "times with different minutes cannot share one cron line; make two routines, or "
            "write oncalendar with one line per time",
            "every day at 9:00 and 17:00",
        ),
        (
            "every month on the 31st",
            "the 31st is missing from some months, so it would skip them; for the last day of "
            'every month say "every month on the last day at 9:00"',
            "every month on the 1st at 9:00",
        ),
        (
            "every month on the last week",
            'expected "last day" or a weekday after "last", found "week"',
            "every month on the last day at 18:00",
        ),
        (
            "every tuesday at 25:00",
            '"25:00": the hour runs 0-23',
            "every weekday at 9:00",
        ),
        (
            "every tuesday at 13pm",
            '"13pm": with am/pm the hour runs 1-12',
            "every friday at 17:30",
        ),
        (
            "every monday at",
            'expected a time after "at", such as 9:00 or 6pm',
            "every day at 6pm",
        ),
        ("every 30", 'expected minutes or hours after "every 30"', "every 30 minutes"),
        (
            "at 9 every weekday",
            'expected a day (day, weekday, weekend, monday…), found "at"',
            "every weekday at 9:00",
        ),
        (
            "every weekday at 9:00 please",
            'did not expect "please"',
            "every weekday at 9:00",
        ),
    ],
)
def test_refusals_say_why_and_offer_the_closest_phrases(
    phrase: str, reason: str, closest: str
) -> None:
    with pytest.raises(ScheduleError) as exc:
        resolve_every(phrase)
    message = str(exc.value)
    assert message.startswith(f'"{phrase}": {reason}; closest accepted forms: "'), message
    assert f'"{closest}"' in message.split("closest accepted forms: ")[1]


def test_an_unknown_phrase_is_never_guessed() -> None:
    for phrase in ("whenever", "sometimes", "every blue moon", "twice a day", "asap"):
        with pytest.raises(ScheduleError, match="closest accepted forms"):
            resolve_every(phrase)


def test_the_loader_reports_a_phrase_refusal_under_its_key(tmp_path: Path) -> None:
    text = COMMAND.replace('cron = "0 6 * * *"', 'every = "every 45 minutes"')
    problems = problems_of(write(tmp_path, "a", text))
    assert problems[0].startswith(f'{tmp_path}/a.toml: [schedule].every: "every 45 minutes": ')


@pytest.mark.parametrize(
    ("phrase", "oncalendar", "description"),
    [
        (
            "every month on the last day at 18:00",
            "*-*~01 18:00:00",
            "At 6:00 PM on the last day of every month",
        ),
        (
            "monthly on the last day",
            "*-*~01 00:00:00",
            "At 12:00 AM on the last day of every month",
        ),
        (
            "last friday of the month at 17:00",
            "Fri *-*~07/1 17:00:00",
            "At 5:00 PM on the last Friday of every month",
        ),
        (
            "every last monday of the month at 9:00",
            "Mon *-*~07/1 09:00:00",
            "At 9:00 AM on the last Monday of every month",
        ),
    ],
)
def test_the_last_day_or_weekday_of_the_month_is_an_oncalendar(
    phrase: str, oncalendar: str, description: str
) -> None:
    # Cron cannot say "the last day": the phrase compiles to the OnCalendar systemd has for it.
    schedule = compile_schedule(ScheduleSpec(every=phrase, timezone="UTC"), Kind.AGENT)
    assert (schedule.cron, schedule.oncalendar) == (None, (f"{oncalendar} UTC",))
    assert schedule.description == description
    after = schedule.next_after(datetime(2027, 2, 1, tzinfo=UTC))
    assert after is not None
    last_of_february = 28 if "last day" in phrase else None
    if last_of_february:
        assert after.local.day == last_of_february and after.local.month == 2
    else:
        assert after.local.month == 2 and after.local.day > 28 - 7


def test_last_friday_of_each_month_of_a_year() -> None:
    schedule = compile_schedule(
        ScheduleSpec(every="last friday of the month at 17:00", timezone="Europe/Berlin"),
        Kind.AGENT,
    )
    got, at = [], datetime(2026, 12, 31, tzinfo=UTC)
    for _ in range(12):
        slot = schedule.next_after(at)
        assert slot is not None
        got.append(slot.local.date().isoformat())
        at = slot.instant
    # The oracle: the calendar module's last Friday of each month of 2027.
    fridays = [
        max(w[calendar.FRIDAY] for w in calendar.monthcalendar(2027, m)) for m in range(1, 13)
    ]
    assert got == [f"2027-{m:02d}-{d:02d}" for m, d in zip(range(1, 13), fridays, strict=True)]
