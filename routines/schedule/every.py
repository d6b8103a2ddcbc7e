"""Plain-language schedules, resolved to cron when a routine loads.

The grammar (for users: the README's "Plain-language schedules"; case and extra spaces do
not matter):

    every [N] minute(s) | every [N] hour(s) | hourly      [on DAYS]
    [every | on] DAYS at TIMES        every weekday at 9:00, every monday and thursday at 8am
    [every] DAYS PART                 every weekday morning, every sunday evening
    every day at TIMES | daily at TIMES
    every PART                        every morning (every day at 8:00 AM)
    every month on the ORD [at TIME] | monthly on the ORD [at TIME]

    DAYS  = day | weekday(s) | weekend(s) | a weekday name (monday or mon, plural allowed),
            several joined by "," or "and"
    TIMES = TIME, or several joined by "and" or "," that share their minutes (9:00 and 17:00)
    TIME  = 9, 9:30, 17:30, 9am, 9:30 pm, noon, midnight
    PART  = morning 8:00 AM · noon 12:00 PM · afternoon 2:00 PM · evening 6:00 PM ·
            night 9:00 PM · midnight 12:00 AM
    ORD   = 1st … 28th (later days are missing from some months: use oncalendar "*-*~01")

N must divide the hour (minutes: 1 2 3 4 5 6 10 12 15 20 30) or the day (hours: 1 2 3 4 6 8
12), or the intervals would not be even. Anything else is refused with the closest accepted
phrases, never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from routines.schedule.error import ScheduleError

__all__ = ["EXAMPLES", "PARTS_OF_DAY", "Plain", "once_calendar", "resolve_every", "resolve_plain"]

PARTS_OF_DAY = {
    "morning": (8, 0),
    "noon": (12, 0),
    "afternoon": (14, 0),
    "evening": (18, 0),
    "night": (21, 0),
    "midnight": (0, 0),
}
EXAMPLES = (
    "every 30 minutes",
    "every 15 minutes on weekdays",
    "every 2 hours",
    "every hour",
    "every day at 6:00",
    "every day at 6pm",
    "daily at 7:30",
    "every morning",
    "every weekday at 9:00",
    "every weekday morning",
    "every friday at 17:30",
    "every monday and thursday at 8am",
    "every weekend at 10am",
    "every day at 9:00 and 17:00",
    "every month on the 1st at 9:00",
    "every month on the last day at 18:00",
    "last friday of the month at 17:00",
)
# What _parse returns for a phrase cron cannot say (the last day of a month): an OnCalendar
# expression behind this mark, which no cron expression starts with.
_CALENDAR = "@calendar "
_WEEKDAY_ABBR = ("Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat")
_ONCE = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{1,2}):(\d{2})")
_DAY_NUMBERS = {
    "monday": 1,
    "tuesday": 2,
    "wednesday": 3,
    "thursday": 4,
    "friday": 5,
    "saturday": 6,
    "sunday": 0,
}
_DAY_WORDS = {
    **{name: n for name, n in _DAY_NUMBERS.items()},
    **{name + "s": n for name, n in _DAY_NUMBERS.items()},
    **{name[:3]: n for name, n in _DAY_NUMBERS.items()},
    "tues": 2,
    "wed": 3,
    "thur": 4,
    "thurs": 4,
}
_TIME = re.compile(r"(\d{1,2})(?::(\d{2}))?(am|pm)?")
_ORDINAL = re.compile(r"(\d{1,2})(st|nd|rd|th)?")
_ORDINAL_WORDS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5}
_MINUTE_STEPS = (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30)
_HOUR_STEPS = (1, 2, 3, 4, 6, 8, 12)


class _Refused(Exception):
    """A specific reason; the caller adds the phrase and the closest forms."""


def _tokens(phrase: str) -> list[str]:
    text = phrase.lower().strip().rstrip(".")
    text = re.sub(r"\b([ap])\.m\.?", r"\1m", text)
    text = re.sub(r"(\d)\s+(am|pm)\b", r"\1\2", text)  # "9 am" → "9am"
    text = text.replace(",", " , ")
    return text.split()


class _Reader:
    def __init__(self, words: list[str]) -> None:
        self.words = words
        self.i = 0

    def peek(self, offset: int = 0) -> str:
        j = self.i + offset
        return self.words[j] if j < len(self.words) else ""

    def take(self, *options: str) -> str | None:
        if self.peek() in options:
            self.i += 1
            return self.words[self.i - 1]
        return None

    def done(self) -> bool:
        return self.i >= len(self.words)


def _time(word: str) -> tuple[int, int]:
    if word == "":
        raise _Refused('expected a time after "at", such as 9:00 or 6pm')
    if word in ("noon", "midday"):
        return 12, 0
    if word == "midnight":
        return 0, 0
    m = _TIME.fullmatch(word)
    if m is None:
        raise _Refused(f'"{word}" is not a time (write 9:00, 17:30, 9am or 6:30pm)')
    hour, minute = int(m.group(1)), int(m.group(2) or 0)
    half = m.group(3)
    if minute > 59:
        raise _Refused(f'"{word}": minutes run 00-59')
    if half:
        if not 1 <= hour <= 12:
            raise _Refused(f'"{word}": with am/pm the hour runs 1-12')
        hour = hour % 12 + (12 if half == "pm" else 0)
    elif hour > 23:
        raise _Refused(f'"{word}": the hour runs 0-23')
    return hour, minute


def _times(r: _Reader) -> tuple[list[int], int]:
    """TIMES: hours and the one minute they share."""
    found = [_time(r.peek())]
    r.i += 1
    while r.peek() in ("and", ",") and r.peek(1) not in ("", "on"):
        r.i += 1
        r.take("and")
        found.append(_time(r.peek()))
        r.i += 1
    minutes = {m for _, m in found}
    if len(minutes) > 1:
        raise _Refused(
            "times with different minutes cannot share one cron line; make two routines, "
            "or write oncalendar with one line per time"
        )
    return sorted({h for h, _ in found}), minutes.pop()


def _days(r: _Reader) -> set[int] | None:
    """DAYS as cron weekday numbers (Sunday = 0); None for "day" (every day)."""
    word = r.peek()
    if word in ("day", "days"):
        r.i += 1
        return None
    if word in ("weekday", "weekdays"):
        r.i += 1
        return {1, 2, 3, 4, 5}
    if word in ("weekend", "weekends"):
        r.i += 1
        r.take("day", "days")
        return {0, 6}
    days: set[int] = set()
    while r.peek() in _DAY_WORDS:
        days.add(_DAY_WORDS[r.words[r.i]])
        r.i += 1
        if r.peek() in (",", "and") and (r.peek(1) in _DAY_WORDS or r.peek(1) == "and"):
            r.i += 1
            r.take("and")
    if not days:
        raise _Refused(f'expected a day (day, weekday, weekend, monday…), found "{word}"')
    return days


def _cron_days(days: set[int] | None) -> str:
    if days is None or len(days) == 7:
        return "*"
    if days == {1, 2, 3, 4, 5}:
        return "1-5"
    return ",".join(str(d) for d in sorted(days))


def _interval(r: _Reader) -> str:
    n = 1
    if r.peek().isdigit():
        n = int(r.words[r.i])
        r.i += 1
    unit = r.take("minute", "minutes", "min", "mins", "hour", "hours")
    if unit is None:
        raise _Refused(f'expected minutes or hours after "every {n}"')
    days = "*"
    if r.take("on"):
        days = _cron_days(_days(r))
    if unit.startswith("min"):
        if n not in _MINUTE_STEPS:
            below = max((m for m in _MINUTE_STEPS if m < n), default=_MINUTE_STEPS[0])
            above = min((m for m in _MINUTE_STEPS if m > n), default=_MINUTE_STEPS[-1])
            nearest = f"every {below}" + (f" or every {above}" if above != below else "")
            marks = [f":{m:02d}" for m in range(0, 60, n)]
            at = " and ".join(marks) if len(marks) <= 2 else f"{marks[0]}, {marks[1]} … {marks[-1]}"
            raise _Refused(
                f"every {n} minutes does not divide the hour evenly, so the gaps could not all "
                f"be {n} minutes; the nearest that do: {nearest} minutes (the steps that divide "
                f"the hour: {', '.join(map(str, _MINUTE_STEPS))}), or oncalendar = "
                f'"*:00/{n}", which runs at {at} each hour'
            )
        return f"{'*' if n == 1 else f'*/{n}'} * * * {days}"
    if n not in _HOUR_STEPS:
        raise _Refused(
            f"every {n} hours does not divide the day evenly; choose one of "
            + ", ".join(map(str, _HOUR_STEPS))
        )
    return f"0 {'*' if n == 1 else f'*/{n}'} * * {days}"


def _last(r: _Reader) -> str:
    """After "last": "day" or a weekday, then [of [the] month] [at TIMES], as OnCalendar
    (`*-*~01`: the last day; `Fri *-*~07/1`: the last Friday, a day of the month's last
    seven)."""
    word = r.peek()
    if word == "day":
        r.i += 1
        days = "*-*~01"
    elif word in _DAY_WORDS:
        r.i += 1
        days = f"{_WEEKDAY_ABBR[_DAY_WORDS[word]]} *-*~07/1"
    else:
        raise _Refused(f'expected "last day" or a weekday after "last", found "{word}"')
    r.take("of")
    r.take("the")
    r.take("month", "months")
    hours, minute = [0], 0
    if r.take("at"):
        hours, minute = _times(r)
    return f"{_CALENDAR}{days} {','.join(f'{h:02d}' for h in hours)}:{minute:02d}:00"


def _monthly(r: _Reader) -> str:
    r.take("on")
    r.take("the")
    word = r.peek()
    if word == "last":
        r.i += 1
        return _last(r)
    m = _ORDINAL.fullmatch(word)
    day = _ORDINAL_WORDS.get(word) or (int(m.group(1)) if m else 0)
    if not 1 <= day <= 31:
        raise _Refused(f'expected a day of the month such as "1st" or "15th", found "{word}"')
    if day > 28:
        raise _Refused(
            f"the {word} is missing from some months, so it would skip them; for the last "
            'day of every month say "every month on the last day at 9:00"'
        )
    r.i += 1
    r.take("day")
    r.take("of")
    r.take("the")
    r.take("month")
    hours, minute = [0], 0
    if r.take("at"):
        hours, minute = _times(r)
    return f"{minute} {','.join(map(str, hours))} {day} * *"


def _parse(r: _Reader) -> str:
    if r.take("hourly"):
        r.i -= 1
        r.words[r.i] = "hour"
        return _interval(r)
    if r.take("monthly"):
        return _monthly(r)
    if r.take("daily"):
        if not r.take("at"):
            raise _Refused('say when: "daily at 7:30"')
        hours, minute = _times(r)
        return f"{minute} {','.join(map(str, hours))} * * *"
    r.take("every", "each", "on")
    if r.take("last"):
        return _last(r)
    if r.peek().isdigit() or r.peek() in ("minute", "hour", "min"):
        return _interval(r)
    if r.take("month"):
        return _monthly(r)
    if r.peek() in PARTS_OF_DAY:
        h, m = PARTS_OF_DAY[r.words[r.i]]
        r.i += 1
        return f"{m} {h} * * *"
    days = _days(r)
    if r.peek() in PARTS_OF_DAY:
        h, m = PARTS_OF_DAY[r.words[r.i]]
        r.i += 1
        return f"{m} {h} * * {_cron_days(days)}"
    if not r.take("at"):
        raise _Refused('say when, as in "every day at 9:00" or "every weekday morning"')
    hours, minute = _times(r)
    return f"{minute} {','.join(map(str, hours))} * * {_cron_days(days)}"


@dataclass(frozen=True, slots=True)
class Plain:
    """What a plain-language phrase resolves to: a cron expression, or (for what cron cannot
    say, such as the last day of a month) an OnCalendar one."""

    cron: str | None = None
    oncalendar: str | None = None


def resolve_plain(phrase: str) -> Plain:
    """The cron or OnCalendar expression a phrase means; ScheduleError if it is not one."""
    words = _tokens(phrase)
    shown = " ".join(phrase.split())

    def hint() -> str:
        import difflib  # only for a refusal: off the start-up path

        closest = difflib.get_close_matches(" ".join(words), EXAMPLES, n=3, cutoff=0.0)
        return "closest accepted forms: " + ", ".join(f'"{c}"' for c in closest)

    if not words:
        raise ScheduleError(f"empty phrase; {hint()}")
    r = _Reader(words)
    try:
        expr = _parse(r)
    except _Refused as why:
        raise ScheduleError(f'"{shown}": {why}; {hint()}') from None
    if not r.done():
        rest = " ".join(words[r.i :])
        raise ScheduleError(f'"{shown}": did not expect "{rest}"; {hint()}')
    if expr.startswith(_CALENDAR):
        return Plain(oncalendar=expr.removeprefix(_CALENDAR))
    return Plain(cron=expr)


def resolve_every(phrase: str) -> str:
    """The cron expression a plain-language phrase means (its OnCalendar form for a phrase
    cron cannot say); ScheduleError if it is not one."""
    plain = resolve_plain(phrase)
    return plain.cron if plain.cron is not None else str(plain.oncalendar)


def once_calendar(text: str) -> str:
    """`once = "2026-12-24 09:00"` as an OnCalendar expression; ScheduleError otherwise."""
    m = _ONCE.fullmatch(text.strip())
    if m is None:
        raise ScheduleError(
            f'expected a date and time such as "2026-12-24 09:00", found "{text.strip()}"'
        )
    year, month, day, hour, minute = (int(g) for g in m.groups())
    try:
        import datetime as _dt

        _dt.datetime(year, month, day, hour, minute)
    except ValueError as exc:
        raise ScheduleError(f'"{text.strip()}" is not a date and time: {exc}') from None
    return f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:00"
