"""systemd calendar events (`man systemd.time`), parsed as systemd 252 parses them.

Accepted: weekday names (Mon or Monday, any case) in lists and ranges (`Mon..Fri`, `Mon-Fri`);
dates `[year-]month-day` with `*`, lists, ranges `a..b` and repetitions `a/n`, `a..b/n`;
two-digit years as systemd reads them (26 → 2026); `~` for days counted from the end of the
month (`*-*~01` is the last day, `*-02~03` the third last day of February); times `h:m[:s]`
with the same chains; the shorthands minutely hourly daily weekly monthly yearly annually
quarterly semiannually (and systemd's spellings biannually, bi-annually, semi-annually,
anually); a trailing `UTC` or IANA zone (`Europe/Berlin`).

Refused, with a message naming the token: anything systemd refuses (such as `*/30`, which
needs a start: `00/30`), fractions of a second, `@TIMESTAMP` one-shots, and zone
abbreviations or legacy names without a slash (`EST`, `CET`, `GMT`), whose meaning depends
on the machine's zone. Every accepted expression gives the same elapses as
`systemd-analyze calendar` (tests/routines/schedule/test_oncalendar_oracle.py) except for the DST
rule (see
`routines.schedule.walltime`) and a systemd 252 bug: a repetition without an end that runs past its
field (`*:00/7` after 23:56) carries into the next unit and skips its first values; we give
what the man page and systemd's own list form (`*:00,07,…,56`) give.

Evaluated PyPI `oncalendar` 1.1 instead of writing this: it steps second by second (slow for
10,000 routines), accepts forms systemd refuses (`*/2` style steps inside lists, any `*`
position), follows systemd's DST behaviour rather than ours, and reports "Bad hour" without
the token, so we keep our own parser and evaluator and use systemd-analyze as the oracle.
"""

from __future__ import annotations

import re
import zoneinfo
from dataclasses import dataclass

from routines.schedule.error import ScheduleError
from routines.schedule.pattern import ALL_WEEKDAYS, MAX_YEAR, MIN_YEAR, Pattern

__all__ = ["SHORTHANDS", "CalendarEvent", "parse_oncalendar"]

SHORTHANDS = {
    "minutely": "*-*-* *:*:00",
    "hourly": "*-*-* *:00:00",
    "daily": "*-*-* 00:00:00",
    "monthly": "*-*-01 00:00:00",
    "weekly": "Mon *-*-* 00:00:00",
    "yearly": "*-01-01 00:00:00",
    "annually": "*-01-01 00:00:00",
    "anually": "*-01-01 00:00:00",  # systemd keeps this misspelling for compatibility
    "quarterly": "*-01,04,07,10-01 00:00:00",
    "semiannually": "*-01,07-01 00:00:00",
    "semi-annually": "*-01,07-01 00:00:00",
    "biannually": "*-01,07-01 00:00:00",
    "bi-annually": "*-01,07-01 00:00:00",
}
_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_WEEKDAY_NAMES = {
    **{d.lower(): i for i, d in enumerate(_WEEKDAYS)},
    **{
        n: i
        for i, n in enumerate(
            ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
        )
    },
}
_WEEKDAY_TOKEN = re.compile(r"[A-Za-z]+")
_COMPONENT = re.compile(r"(\d+)(?:\.\.(\d+))?(?:/(\d+))?")
_HINT = "see `man systemd.time`"

# field: (name, lowest, highest, print width)
_YEAR = ("year", MIN_YEAR, MAX_YEAR, 4)
_MONTH = ("month", 1, 12, 2)
_DAY = ("day", 1, 31, 2)
_HOUR = ("hour", 0, 23, 2)
_MINUTE = ("minute", 0, 59, 2)
_SECOND = ("second", 0, 59, 2)

Component = tuple[int, int, int]  # start, stop (-1: none), repeat (0: none), as systemd keeps


@dataclass(frozen=True)
class CalendarEvent:
    """A parsed calendar event: its pattern, its own zone if it names one, systemd's form."""

    text: str
    pattern: Pattern
    zone: str | None  # "UTC" or an IANA name written at the end of the expression
    normalized: str  # what `systemd-analyze calendar` prints as "Normalized form"


def _fail(token: str, why: str) -> ScheduleError:
    return ScheduleError(f'"{token}": {why}; {_HINT}')


def _parse_weekdays(token: str) -> int:
    """systemd's parse_weekdays: a bitmask, Monday = bit 0."""
    bits = 0
    rest = token
    range_start = -1
    while True:
        m = _WEEKDAY_TOKEN.match(rest)
        name = m.group(0).lower() if m else ""
        if name not in _WEEKDAY_NAMES:
            shown = m.group(0) if m else rest or token
            raise _fail(
                token,
                f'"{shown}" is not a weekday: expected Mon…Sun or Monday…Sunday, '
                "in lists (Mon,Wed) or ranges (Mon..Fri)",
            )
        day = _WEEKDAY_NAMES[name]
        bits |= 1 << day
        if range_start >= 0:
            if range_start > day:
                raise _fail(token, "a weekday range must run forward, Mon..Sun")
            for j in range(range_start + 1, day):
                bits |= 1 << j
        rest = rest[len(name) :]
        if rest == "":
            return bits
        if rest.startswith(".."):
            if range_start >= 0:
                raise _fail(token, "a weekday range has two ends, as in Mon..Fri")
            range_start, rest = day, rest[2:]
        elif rest.startswith("-"):
            if range_start >= 0:
                raise _fail(token, "a weekday range has two ends, as in Mon..Fri")
            range_start, rest = day, rest[1:]
        elif rest.startswith(","):
            range_start, rest = -1, rest[1:]
            if rest == "":
                return bits  # systemd allows a trailing comma ("Wed, 17:48")
        else:
            raise _fail(token, f'unexpected "{rest}" after a weekday')
        if rest == "":
            raise _fail(token, "a weekday range needs an end, as in Mon..Fri")


def _parse_chain(token: str, text: str, field: tuple[str, int, int, int]) -> list[Component] | None:
    """One field's chain: None for `*`, else systemd's components, checked."""
    name = field[0]
    if text == "*":
        return None
    if text == "":
        raise _fail(token, f"the {name} is missing")
    if text.startswith("*"):
        raise _fail(
            token,
            f'"{text}": a repetition needs a start value, as in "00/{text[2:] or "15"}" '
            f"(systemd refuses {text})"
            if text.startswith("*/")
            else f'"{text}": * stands alone, not in a list',
        )
    comps: list[Component] = []
    for part in text.split(","):
        m = _COMPONENT.fullmatch(part)
        if m is None:
            if name == "second" and re.fullmatch(r"[\d.]+(/[\d.]+)?", part):
                raise _fail(token, f'"{part}": fractions of a second are not supported')
            raise _fail(
                token,
                f'cannot read the {name} "{part}": expected a number, a range a..b, '
                "a repetition a/n or a..b/n, a list, or *",
            )
        start = int(m.group(1))
        stop = int(m.group(2)) if m.group(2) is not None else -1
        repeat = 1 if m.group(2) is not None else 0
        if m.group(3) is not None:
            repeat = int(m.group(3))
            if repeat == 0:
                raise _fail(token, f'"{part}": a repetition must be at least 1')
        comps.append((start, stop, repeat))
    return comps


def _fix_year(comps: list[Component]) -> list[Component]:
    def fix(v: int) -> int:
        if 0 <= v < 70:
            return v + 2000
        if 70 <= v < 100:
            return v + 1900
        return v

    return [(fix(a), fix(b) if b >= 0 else b, r) for a, b, r in comps]


def _normalize(comps: list[Component]) -> list[Component]:
    """systemd's normalize_chain: trim stop to the repetition, drop what cannot repeat, sort."""
    out = set()
    for start, stop_in, repeat_in in comps:
        stop, repeat = stop_in, repeat_in
        if stop > start and repeat > 0:
            stop -= (stop - start) % repeat
        if (stop > start and start + repeat > stop) or start == stop:
            stop, repeat = -1, 0
        out.add((start, stop, repeat))
    return sorted(out)


def _check(
    token: str, comps: list[Component], field: tuple[str, int, int, int], end_of_month: bool
) -> None:
    """systemd's chain_valid, with a message for the first component it refuses."""
    name, low, high, _ = field
    if end_of_month:
        high -= 3  # at most the 28th day counted from the end

    def show(c: Component) -> str:
        text = f"{c[0]}" + (f"..{c[1]}" if c[1] >= 0 else "")
        text += f"/{c[2]}" if c[2] and not (c[1] >= 0 and c[2] == 1) else ""
        return f'day "~{text}" (counted from the end of the month)' if end_of_month else text

    for c in comps:
        start, stop, repeat = c
        shown = show(c) if end_of_month else f'{name} "{show(c)}"'
        if not low <= start <= high or (stop >= 0 and not low <= stop <= high):
            raise _fail(token, f"{shown} is out of range {low}-{high}")
        if repeat > high - low:
            raise _fail(token, f'repetition "/{repeat}" is longer than the {name} range')
        if stop >= 0 and start + repeat > stop:
            raise _fail(token, f"{shown}: the range runs backwards")
        if stop < 0 and end_of_month and start - repeat < low:
            raise _fail(token, f"{shown} repeats past the start of the month")
        if stop < 0 and not end_of_month and start + repeat > high:
            raise _fail(token, f"{shown} repeats past the end of the {name} range")


def _values(comps: list[Component] | None, high: int) -> list[int] | None:
    if comps is None:
        return None
    out: set[int] = set()
    for start, stop, repeat in comps:
        out.add(start)
        if repeat:
            out.update(range(start, (stop if stop >= 0 else high) + 1, repeat))
    return sorted(v for v in out if v <= high)


def _last_day_values(comps: list[Component] | None) -> list[int] | None:
    """Days counted from the end (1 = last): a repetition without an end runs towards the
    1st of the month (systemd counts `~07/2` as the 7th, 5th, 3rd and last day from the end)."""
    if comps is None:
        return None
    out: set[int] = set()
    for start, stop, repeat in comps:
        out.add(start)
        if repeat and stop >= 0:
            out.update(range(start, stop + 1, repeat))
        elif repeat:
            out.update(range(start, 0, -repeat))
    return sorted(out)


def _format_chain(comps: list[Component] | None, width: int) -> str:
    if comps is None:
        return "*"
    parts = []
    for start, stop, repeat in comps:
        s = f"{start:0{width}d}"
        if stop > 0:
            s += f"..{stop:0{width}d}"
        if repeat > 0 and not (stop > 0 and repeat == 1):
            s += f"/{repeat}"
        parts.append(s)
    return ",".join(parts)


def _format_weekdays(bits: int) -> str:
    out: list[str] = []
    day = 0
    while day < 7:
        if bits & (1 << day):
            end = day
            while end + 1 < 7 and bits & (1 << (end + 1)):
                end += 1
            if end - day >= 2:
                out.append(f"{_WEEKDAYS[day]}..{_WEEKDAYS[end]}")
            else:
                out.extend(_WEEKDAYS[day : end + 1])
            day = end + 1
        else:
            day += 1
    return ",".join(out)


def _split_zone(text: str) -> tuple[str, str | None]:
    head, sep, last = text.rpartition(" ")
    if not sep:
        return text, None
    if last.upper() == "UTC":
        return head.rstrip(), "UTC"
    if "/" in last and not last.startswith(("/", ".")) and ":" not in last:
        try:
            zoneinfo.ZoneInfo(last)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            if re.fullmatch(r"[A-Za-z_+-]+(/[A-Za-z0-9_+-]+)+", last):
                raise _fail(
                    last, "not a time zone in this machine's tz database (names are case-sensitive)"
                ) from None
            return text, None
        return head.rstrip(), last
    if re.fullmatch(r"[A-Za-z][A-Za-z0-9_+-]*", last) and last.lower() not in _WEEKDAY_NAMES:
        try:
            zoneinfo.ZoneInfo(last)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            return text, None
        raise _fail(
            last,
            "a zone abbreviation or legacy zone name depends on the machine's settings; "
            'write UTC or an IANA name such as "Europe/Berlin"',
        )
    return text, None


@dataclass(frozen=True)
class _Tokens:
    bits: int  # weekdays, Monday = bit 0; 0 when none were written
    date_token: str
    date_chains: tuple[str, str, str]  # year, month, day
    end_of_month: bool
    time_token: str
    time_chains: tuple[str, str, str]  # hour, minute, second


def _split(body: str) -> _Tokens:
    """Weekdays, date and time, in that order, each optional, as systemd reads them."""
    tokens = body.split(" ")
    bits = 0
    if tokens[0][0].isalpha():
        bits = _parse_weekdays(tokens.pop(0))
    date_chains, end_of_month, date_token = ("*", "*", "*"), False, ""
    if tokens and re.match(r"[^:]*[-~]", tokens[0]) and ":" not in tokens[0]:
        date_token = tokens.pop(0)
        parts = re.split(r"([-~])", date_token)
        chains, seps = parts[0::2], parts[1::2]
        if len(chains) == 2:
            date_chains, end_of_month = ("*", chains[0], chains[1]), seps[0] == "~"
        elif len(chains) == 3 and seps[0] == "-":
            date_chains, end_of_month = (chains[0], chains[1], chains[2]), seps[1] == "~"
        else:
            raise _fail(
                date_token,
                "expected a date as year-month-day or month-day (with ~ before a day "
                "counted from the end of the month)",
            )
    time_chains, time_token = ("00", "00", "00"), ""
    if tokens:
        time_token = tokens.pop(0)
        pieces = time_token.split(":")
        if len(pieces) == 2:
            time_chains = (pieces[0], pieces[1], "00")
        elif len(pieces) == 3:
            time_chains = (pieces[0], pieces[1], pieces[2])
        else:
            what = "a date or a time" if not date_token else "a time"
            raise _fail(time_token, f"expected {what} (hour:minute or hour:minute:second)")
    if tokens:
        raise _fail(tokens[0], "unexpected text after the time")
    return _Tokens(bits, date_token, date_chains, end_of_month, time_token, time_chains)


def _chain(
    token: str, text: str, field: tuple[str, int, int, int], end_of_month: bool = False
) -> list[Component] | None:
    """Parse, fix two-digit years, normalize and check one field, as systemd does."""
    comps = _parse_chain(token, text, field)
    if comps is None:
        return None
    if field is _YEAR:
        comps = _fix_year(comps)
    comps = _normalize(comps)
    _check(token, comps, field, end_of_month)
    return comps


def parse_oncalendar(text: str) -> CalendarEvent:
    """Parse one calendar event; raises ScheduleError naming the token systemd would refuse."""
    raw = " ".join(text.split())
    if not raw:
        raise ScheduleError('empty OnCalendar expression: expected something like "Mon..Fri 09:00"')
    if raw.startswith("@"):
        raise _fail(raw, "one-shot @TIMESTAMP events are not supported: a routine repeats")
    body, zone = _split_zone(raw)
    if not body:
        raise _fail(raw, "a zone alone is not a calendar event")
    t = _split(SHORTHANDS.get(body.lower(), body))

    d, tm = t.date_token, t.time_token
    end_of_month = t.end_of_month and t.date_chains[2] != "*"  # systemd drops ~ before *
    years = _chain(d, t.date_chains[0], _YEAR)
    months = _chain(d, t.date_chains[1], _MONTH)
    days = _chain(d, t.date_chains[2], _DAY, end_of_month)
    hours = _chain(tm, t.time_chains[0], _HOUR)
    minutes = _chain(tm, t.time_chains[1], _MINUTE)
    seconds = _chain(tm, t.time_chains[2], _SECOND) or [(0, -1, 1)]  # systemd: * is 0/1

    bits = 0 if t.bits == 127 else t.bits
    year_values = _values(years, MAX_YEAR)
    day_values = _last_day_values(days) if end_of_month else _values(days, 31)
    pattern = Pattern(
        hours=tuple(_values(hours, 23) or range(24)),
        minutes=tuple(_values(minutes, 59) or range(60)),
        seconds=tuple(_values(seconds, 59) or range(60)),
        days=frozenset() if end_of_month else frozenset(day_values or range(1, 32)),
        last_days=frozenset(day_values or ()) if end_of_month else frozenset(),
        weekdays=frozenset(d for d in range(7) if bits & (1 << d)) if bits else ALL_WEEKDAYS,
        months=frozenset(_values(months, 12) or range(1, 13)),
        years=frozenset(year_values) if year_values is not None else None,
        elapsed=hours is None or "/" in t.time_chains[0],
    )
    seconds_text = "*" if seconds == [(0, -1, 1)] else _format_chain(seconds, 2)
    normalized = (
        (f"{_format_weekdays(bits)} " if bits else "")
        + f"{_format_chain(years, 4)}-{_format_chain(months, 2)}"
        + f"{'~' if end_of_month else '-'}{_format_chain(days, 2)} "
        + f"{_format_chain(hours, 2)}:{_format_chain(minutes, 2)}:{seconds_text}"
        + (f" {zone}" if zone else "")
    )
    return CalendarEvent(text=text, pattern=pattern, zone=zone, normalized=normalized)
