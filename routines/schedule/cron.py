"""Five-field cron, strictly: what Vixie cron and cronie accept, and a clear refusal otherwise.

Accepted: numbers, names (JAN…DEC, SUN…SAT, any case), 0 and 7 for Sunday, `*`, ranges
`a-b`, lists `a,b`, steps `*/n`, `a-b/n` and `a/n` (a to the end of the field), and the
shortcuts @hourly @daily @midnight @weekly @monthly @yearly @annually. Refused, each with a
message that names the token and points at `oncalendar`: Jenkins `H`, Quartz `? L W #`,
6 or 7 fields, out-of-range values, backwards ranges, `@reboot` and unknown shortcuts,
empty or mangled strings.

Day of month and day of week: when both are restricted a day matching either fires (`0 0 1 *
MON`: the 1st and every Monday); a field that starts with `*` (such as `*/2`) counts as
unrestricted, as in Vixie cron and cronie, so `0 0 */2 * MON` fires on Mondays that are odd
days. croniter agrees with `implement_cron_bug=True`; the tests hold us to it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from routines.schedule.error import ScheduleError
from routines.schedule.pattern import Pattern

__all__ = ["SHORTCUTS", "CronExpr", "parse_cron"]

SHORTCUTS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}

_HINT = "for what cron cannot say, use [schedule].oncalendar"
_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_NAMES: tuple[dict[str, int], ...] = (
    {},
    {},
    {},
    {n: i + 1 for i, n in enumerate(_MONTHS)},
    {n: i for i, n in enumerate(_DAYS)},
)
_ELEMENT = re.compile(
    r"(?:(?P<star>\*)|(?P<lo>[0-9]+|[A-Za-z]+)(?:-(?P<hi>[0-9]+|[A-Za-z]+))?)"
    r"(?:/(?P<step>[0-9]+))?"
)


@dataclass(frozen=True)
class CronExpr:
    """A parsed cron expression: the set each field allows, as cron numbers it."""

    text: str  # as written
    fields: tuple[str, ...]  # the five fields (a shortcut expanded)
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]  # day of month
    months: frozenset[int]
    weekdays: frozenset[int]  # cron numbering: Sunday = 0 … Saturday = 6
    stepped: tuple[bool, ...]  # per field: written with a step (the translator keeps it)

    @property
    def shortcut(self) -> str | None:
        t = self.text.strip().lower()
        return t if t in SHORTCUTS else None

    @property
    def dom_star(self) -> bool:
        return self.fields[2].startswith("*")

    @property
    def dow_star(self) -> bool:
        return self.fields[4].startswith("*")

    @property
    def day_or(self) -> bool:
        """Vixie cron's rule: OR the day fields unless one of them starts with `*`."""
        return not self.dom_star and not self.dow_star

    @property
    def hour_fixed(self) -> bool:
        """The hour field names hours (no `*`, no step): DST keeps wall-clock times."""
        return "*" not in self.fields[1] and "/" not in self.fields[1]

    def pattern(self) -> Pattern:
        return Pattern(
            hours=tuple(sorted(self.hours)),
            minutes=tuple(sorted(self.minutes)),
            days=self.days,
            weekdays=frozenset((d + 6) % 7 for d in self.weekdays),  # to Monday = 0
            months=self.months,
            day_or=self.day_or,
            elapsed=not self.hour_fixed,
        )


def _refuse(message: str) -> ScheduleError:
    """A refusal; it points at oncalendar unless the message already names a form there."""
    return ScheduleError(message if "oncalendar" in message else f"{message}; {_HINT}")


def _quartz_or_jenkins(index: int, token: str) -> ScheduleError | None:
    name = _FIELDS[index]
    up = token.upper()
    # H, H/5, H(0-29); not the H of THU. (`"H" in up` first: the pattern compiles in ~1 ms,
    # which `list` would pay on every start.)
    if "H" in up and re.search(r"(?<![A-Z])H(?![A-Z])", up):
        return _refuse(f'"{token}" in the {name} field is Jenkins\' hash syntax (H), not cron')
    if "?" in token:
        return _refuse(f'"{token}" in the {name} field is Quartz syntax ("?"), not cron; write *')
    if "#" in token:
        return _refuse(
            f'"{token}" in the {name} field is Quartz syntax (nth weekday "#"), not cron; '
            'for example the second Monday is oncalendar = "Mon *-*-08..14 09:00"'
        )
    if index == 2 and re.fullmatch(r"L|LW|\d*W|L-\d+", up):
        return _refuse(
            f'"{token}" in the {name} field is Quartz syntax (L or W), not cron; '
            'the last day of the month is oncalendar = "*-*~01 09:00"'
        )
    if index == 4 and re.fullmatch(r"L|\d+L|[A-Z]{3}L", up):
        return _refuse(
            f'"{token}" in the {name} field is Quartz syntax (L, the last weekday), not cron; '
            'for example the last Friday is oncalendar = "Fri *-*~07/1 09:00"'
        )
    return None


def _value(index: int, text: str, token: str) -> int:
    name = _FIELDS[index]
    low, high = _RANGES[index]
    if text.isdigit():
        v = int(text)
        if not low <= v <= high:
            where = "" if text == token else f' (in "{token}")'
            raise _refuse(f'{name} "{text}" is out of range {low}-{high}{where}')
        return v
    names = _NAMES[index]
    if not names:
        raise _refuse(f'cannot read "{token}" in the {name} field: expected numbers {low}-{high}')
    up = text.upper()
    if up not in names:
        known = ", ".join(names)
        hint = " (three-letter names only)" if any(up.startswith(n) for n in names) else ""
        raise _refuse(f'unknown {name} name "{text}"{hint}: expected one of {known}')
    return names[up]


def _element(index: int, token: str) -> tuple[set[int], bool]:
    name = _FIELDS[index]
    low, high = _RANGES[index]
    m = _ELEMENT.fullmatch(token)
    if m is None:
        raise _refuse(
            f'cannot read "{token}" in the {name} field: expected a number, a range such as '
            "1-5, a list such as 1,15, or a step such as */15"
        )
    step = 1
    if m["step"] is not None:
        step = int(m["step"])
        if step == 0:
            raise _refuse(f'step "/0" in "{token}" ({name}): a step must be at least 1')
        if step > high - low + 1:
            raise _refuse(
                f'step "/{step}" in "{token}" is longer than the {name} field ({low}-{high})'
            )
    if m["star"]:
        start, stop = low, high
    else:
        start = _value(index, m["lo"], token)
        if m["hi"] is not None:
            stop = _value(index, m["hi"], token)
            if stop < start:
                fix = (
                    f"7 is Sunday too, so write {start}-7"
                    if index == 4 and stop == 0
                    else f"write {m['hi']}-{m['lo']}, or {m['lo']}-{high},{low}-{m['hi']} to wrap"
                )
                raise _refuse(
                    f'range "{token}" in the {name} field runs backwards (cron ranges do not '
                    f"wrap around); {fix}"
                )
        elif m["step"] is not None:
            stop = high  # "a/n": from a to the end of the field, as croniter and systemd read it
        else:
            stop = start
    values = set(range(start, stop + 1, step))
    if index == 4:
        values = {0 if v == 7 else v for v in values}
    return values, m["step"] is not None


def parse_cron(text: str) -> CronExpr:
    """Parse a five-field cron expression or shortcut; raises ScheduleError naming the token."""
    raw = text.strip()
    if not raw:
        raise _refuse('empty cron expression: expected five fields such as "0 9 * * 1-5"')
    if raw.startswith("@"):
        expanded = SHORTCUTS.get(raw.lower())
        if expanded is None:
            if raw.lower() == "@reboot":
                raise _refuse('"@reboot" is not supported: routines run on a clock, not at boot')
            raise _refuse(f'unknown shortcut "{raw}": expected one of {", ".join(SHORTCUTS)}')
        fields = expanded.split()
    else:
        fields = raw.split()
    if len(fields) in (6, 7):
        raise _refuse(
            f"expected 5 fields (minute hour day-of-month month day-of-week), found "
            f'{len(fields)} in "{raw}": a seconds or year field is not cron'
        )
    if len(fields) != 5:
        raise _refuse(
            f"expected 5 fields (minute hour day-of-month month day-of-week), found "
            f'{len(fields)} in "{raw}"'
        )
    sets: list[frozenset[int]] = []
    stepped: list[bool] = []
    for index, field_text in enumerate(fields):
        values: set[int] = set()
        any_step = False
        for token in field_text.split(","):
            if token == "":
                raise _refuse(f'empty list item in "{field_text}" ({_FIELDS[index]} field)')
            bad = _quartz_or_jenkins(index, token)
            if bad is not None:
                raise bad
            got, has_step = _element(index, token)
            values |= got
            any_step = any_step or has_step
        sets.append(frozenset(values))
        stepped.append(any_step)
    return CronExpr(
        text=text,
        fields=tuple(fields),
        minutes=sets[0],
        hours=sets[1],
        days=sets[2],
        months=sets[3],
        weekdays=sets[4],
        stepped=tuple(stepped),
    )
