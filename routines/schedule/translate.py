"""cron → systemd OnCalendar, line for line, or a refusal.

systemd needs a start for a repetition (`systemd-analyze calendar` refuses `*:*/30`), so one is kept
(`*/30 * * * *` → `*-*-* *:00/30:00`, `0 */6 * * *` → `*-*-* 00/6:00:00`), and cron's day-of-month
OR day-of-week, which systemd cannot say in one line (it ANDs them), becomes two lines. One more
correction: `@weekly` is Sunday midnight in cron, but systemd's `weekly` is Monday, so it becomes
`Sun *-*-* 00:00:00`. Everything cron refuses (`routines.schedule.cron`) is refused here with the
same message, and so is a cron no date matches (`0 0 30 2 *`): its line would be accepted by systemd
and never elapse. Each translation is accepted by `systemd-analyze calendar` and fires at the
instants croniter computes (tests/routines/schedule/test_translate.py); across a DST change systemd
keeps its own rule
(see `routines.schedule.walltime`).
"""

from __future__ import annotations

import itertools
from datetime import date

from routines.schedule.cron import CronExpr, parse_cron
from routines.schedule.error import never_fires
from routines.schedule.pattern import MIN_YEAR, runs

__all__ = ["translate", "translate_cron"]

_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_SHORTHANDS = {
    "@hourly": "hourly",
    "@daily": "daily",
    "@midnight": "daily",
    "@weekly": "Sun *-*-* 00:00:00",  # not "weekly": that is Monday
    "@monthly": "monthly",
    "@yearly": "yearly",
    "@annually": "yearly",
}


def _chain(values: frozenset[int], low: int, high: int, stepped: bool, day: bool = False) -> str:
    """One field as a systemd chain: `*`, `00/30`, `00..56/7`, `09..17`, `01,07`."""
    ordered = sorted(values)
    if ordered == list(range(low, high + 1)):
        return "*"
    if stepped and len(ordered) >= 2:
        k = ordered[1] - ordered[0]
        if all(b - a == k for a, b in itertools.pairwise(ordered)):
            # systemd 252 lets a repetition without an end run past the field and carries
            # the rest into the next unit, resetting only the unit just below: `*:00/7` from
            # 23:56 elapses at 00:07, skipping midnight. And a bare repetition that does not
            # start at the field's first value (`*-04/6-01`, `03/6:45`) makes it fail in a
            # DST zone ("Failed to determine next elapse … Resource deadlock avoided"), so
            # the timer never fires (tests/routines/schedule/test_translate.py,
            # test_steps_with_a_start_*).
            # Only a repetition from the first value whose carry lands back on it (`00/30`,
            # `00/6`) keeps the bare form; every other one gets its end.
            carry = ordered[-1] + k - (high + 1) + low
            if not day and ordered[0] == low and ordered[-1] + k > high and carry <= low:
                return f"{ordered[0]:02d}/{k}"
            return f"{ordered[0]:02d}..{ordered[-1]:02d}/{k}"
    parts = []
    for a, b in runs(ordered):
        if b - a >= 2:
            parts.append(f"{a:02d}..{b:02d}")
        else:
            parts.extend(f"{v:02d}" for v in range(a, b + 1))
    return ",".join(parts)


def _weekdays(cron_days: frozenset[int]) -> str:
    """cron's Sunday = 0 set as systemd names, Monday first: `Mon..Fri`, `Sat,Sun`."""
    days = sorted((d + 6) % 7 for d in cron_days)
    parts = []
    for a, b in runs(days):
        if b - a >= 2:
            parts.append(f"{_WEEKDAYS[a]}..{_WEEKDAYS[b]}")
        else:
            parts.extend(_WEEKDAYS[d] for d in range(a, b + 1))
    return ",".join(parts)


def translate(expr: CronExpr, zone: str | None = None) -> tuple[str, ...]:
    """The OnCalendar line(s) that fire when `expr` does; `zone` is appended when given."""
    suffix = f" {zone}" if zone else ""
    shortcut = expr.shortcut
    if shortcut is not None:
        return (_SHORTHANDS[shortcut] + suffix,)
    st = expr.stepped
    time = f"{_chain(expr.hours, 0, 23, st[1])}:{_chain(expr.minutes, 0, 59, st[0])}:00"
    months = _chain(expr.months, 1, 12, st[3])
    days = _chain(expr.days, 1, 31, st[2], day=True)
    dow_all = len(expr.weekdays) == 7
    weekdays = "" if dow_all else _weekdays(expr.weekdays) + " "
    if expr.day_or and days != "*" and not dow_all:
        # cron ORs the day fields, systemd ANDs them: one line for each.
        return (
            f"{weekdays}*-{months}-* {time}{suffix}",
            f"*-{months}-{days} {time}{suffix}",
        )
    if expr.day_or and (days == "*" or dow_all):
        weekdays, days = "", "*"  # "1-31 OR Monday", "1st OR any day": every day
    return (f"{weekdays}*-{months}-{days} {time}{suffix}",)


def translate_cron(text: str, zone: str | None = None) -> tuple[str, ...]:
    """Parse and translate; raises ScheduleError with cron's refusal message, or the one for
    a cron that never fires."""
    expr = parse_cron(text)
    if expr.pattern().next_date(date(MIN_YEAR, 1, 1)) is None:
        raise never_fires(text)
    return translate(expr, zone)
