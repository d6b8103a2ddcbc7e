"""Descriptions of schedules, written by code from the evaluated pattern, never by a model.

"Every weekday at 9:00 AM", "Every 30 minutes", "At 6:00 AM on the 1st of every month".
Describing the `Pattern` (what actually runs) rather than the text keeps cron, OnCalendar and
plain language consistent and the description honest: cron-descriptor, for instance, reads
`0 0 */2 * MON` as "every 2 days, or on Monday", but Vixie cron runs it on Mondays that are
odd days, and it cannot read OnCalendar at all.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from routines.schedule.pattern import ALL_MONTHS, MAX_YEAR, Pattern, runs

__all__ = ["describe", "format_time", "ordinal"]

_WEEKDAY = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTH = (
    "",
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_NTH_WEEK = {1: "first", 8: "second", 15: "third", 22: "fourth"}
_LIST_LIMIT = 6  # more times than this a day are summarised, not listed


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def format_time(h: int, m: int, s: int = 0, seconds: bool = False) -> str:
    """`9:00 AM`, `12:30 PM`, `12:00 AM` (midnight); `9:00:30 AM` with seconds."""
    half = "AM" if h < 12 else "PM"
    h12 = h % 12 or 12
    return f"{h12}:{m:02d}:{s:02d} {half}" if seconds else f"{h12}:{m:02d} {half}"


def _join(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _step(values: tuple[int, ...]) -> int | None:
    """The common difference of an arithmetic progression of 2+ values, else None."""
    if len(values) < 2:
        return None
    k = values[1] - values[0]
    if all(b - a == k for a, b in itertools.pairwise(values)):
        return k
    return None


def _covers(values: tuple[int, ...], size: int) -> int | None:
    """k when `values` is every k-th value of a cycle of `size` (k divides it), else None."""
    if len(values) == size:
        return 1
    k = _step(values)
    if k is not None and size % k == 0 and values[0] < k and len(values) == size // k:
        return k
    return None


# -- time of day --


def _interval(p: Pattern) -> str | None:
    """Phrases like "Every 30 minutes" for regular patterns, else None."""
    h, m, s = p.hours, p.minutes, p.seconds
    every_s = _covers(s, 60)
    every_m = _covers(m, 60)
    every_h = _covers(h, 24)
    if every_s is not None and len(s) > 1 and every_m == 1 and every_h == 1:
        return "Every second" if every_s == 1 else f"Every {every_s} seconds"
    if len(s) != 1:
        return None
    sec = s[0]
    if every_m is not None and len(m) > 1:
        lead = "Every minute" if every_m == 1 else f"Every {every_m} minutes"
        if every_h == 1:
            if m[0] == 0 and sec == 0:
                return lead
            return f"{lead}, starting at {_minutes_past(m[:1])} the hour"
        if len(h) >= 1 and _step(h) in (None, 1) and len(runs(list(h))) == 1:
            return f"{lead} from {format_time(h[0], m[0])} to {format_time(h[-1], m[-1])}"
        return None
    if len(m) == 1 and sec == 0:
        minute = m[0]
        if every_h == 1:
            return "Every hour" if minute == 0 else f"Every hour at {_minutes_past(m)}"
        if every_h is not None and len(h) >= 3:
            start = "" if (h[0], minute) == (0, 0) else f", starting at {format_time(h[0], minute)}"
            return f"Every {every_h} hours{start}"
        k = _step(h)
        # Three times a day read better as a list ("at 9:00 AM, 1:00 PM and 5:00 PM").
        if k is not None and len(h) >= 4:
            lead = "Every hour" if k == 1 else f"Every {k} hours"
            return f"{lead} from {format_time(h[0], minute)} to {format_time(h[-1], minute)}"
    return None


def _times(p: Pattern) -> str:
    """The times: "at 9:00 AM", "at 9:00 AM and 5:00 PM", or a summary for many."""
    show_s = p.seconds != (0,)
    if p.per_day <= _LIST_LIMIT:
        times = [
            format_time(h, m, s, show_s) for h in p.hours for m in p.minutes for s in p.seconds
        ]
        return "at " + _join(times)
    if not show_s:
        spans = runs(list(p.hours))
        if len(spans) == 1 and len(p.hours) >= 3:
            hours = f"each hour from {_hour(p.hours[0])} to {_hour(p.hours[-1])}"
        else:
            hours = _spans(p.hours, _hour)
        if p.minutes == (0,):
            return f"on the hour, {hours}"
        return f"at {_minutes_past(p.minutes)} {hours}"
    first = format_time(p.hours[0], p.minutes[0], p.seconds[0], True)
    last = format_time(p.hours[-1], p.minutes[-1], p.seconds[-1], True)
    return f"{p.per_day} times a day from {first} to {last}"


def _hour(h: int) -> str:
    return format_time(h, 0).replace(":00", "")


def _spans(values: tuple[int, ...], name: Callable[[int], str]) -> str:
    """Values named one by one, a run of three or more as "a through b"."""
    parts = []
    for a, b in runs(list(values)):
        if b - a >= 2:
            parts.append(f"{name(a)} through {name(b)}")
        else:
            parts.extend(name(v) for v in range(a, b + 1))
    return _join(parts)


def _minutes_past(minutes: tuple[int, ...]) -> str:
    """ "1 minute past", "5, 10 and 20 minutes past", "minutes 25 through 42 past"."""
    if len(minutes) == 1:
        return f"{minutes[0]} minute past" if minutes[0] == 1 else f"{minutes[0]} minutes past"
    if any(b - a >= 2 for a, b in runs(list(minutes))):
        return f"minutes {_spans(minutes, str)} past"
    return f"{_join([str(m) for m in minutes])} minutes past"


# -- days --


def _weekdays_every(days: frozenset[int]) -> str:
    """After "Every": "weekday", "Monday", "Monday and Thursday", "Monday through Thursday"."""
    if days == frozenset(range(5)):
        return "weekday"
    ordered = sorted(days)
    spans = runs(ordered)
    if len(spans) == 1 and len(ordered) >= 3:
        return f"{_WEEKDAY[ordered[0]]} through {_WEEKDAY[ordered[-1]]}"
    return _join([_WEEKDAY[d] for d in ordered])


def _weekdays_on(days: frozenset[int]) -> str:
    """After "on": "weekdays", "weekends", "Mondays and Thursdays", "Monday through Thursday"."""
    if days == frozenset(range(5)):
        return "weekdays"
    if days == frozenset({5, 6}):
        return "weekends"
    ordered = sorted(days)
    spans = runs(ordered)
    if len(spans) == 1 and len(ordered) >= 3:
        return f"{_WEEKDAY[ordered[0]]} through {_WEEKDAY[ordered[-1]]}"
    return _join([_WEEKDAY[d] + "s" for d in ordered])


def _days_of_month(p: Pattern) -> str:
    """The days: "the 1st and 15th", "the 1st through 7th", "the last day", "odd-numbered days"."""
    if p.last_days:
        ks = sorted(p.last_days)
        if ks == list(range(1, len(ks) + 1)) and len(ks) > 1:
            return f"the last {len(ks)} days"
        names = ["last" if k == 1 else f"{ordinal(k)}-to-last" for k in ks]
        return "the " + _join(names) + (" day" if len(ks) == 1 else " days")
    ds = tuple(sorted(p.days))
    k = _step(ds)
    if k == 2 and len(ds) >= 14 and ds[0] in (1, 2):
        return "odd-numbered days" if ds[0] == 1 else "even-numbered days"
    if k is not None and k > 1 and len(ds) >= 4:
        return f"every {ordinal(k)} day from the {ordinal(ds[0])}"
    parts = []
    for a, b in runs(list(ds)):
        if b - a >= 2:
            parts.append(f"{ordinal(a)} through {ordinal(b)}")
        else:
            parts.extend(ordinal(d) for d in range(a, b + 1))
    return "the " + _join(parts)


def _months(p: Pattern) -> str:
    """The months: "every month", "January", "January and July"."""
    if p.months == ALL_MONTHS:
        return "every month"
    return _join([_MONTH[m] for m in sorted(p.months)])


def _years(p: Pattern) -> str:
    if p.years is None:
        return ""
    ys = tuple(sorted(p.years))
    if len(ys) == 1:
        return f" in {ys[0]}"
    k = _step(ys)
    if k is not None and ys[-1] + k > MAX_YEAR:
        if k == 1:
            return f" from {ys[0]} on"
        every = "every other year" if k == 2 else f"every {ordinal(k)} year"
        return f" in {every} from {ys[0]}"
    if k == 1:
        return f" from {ys[0]} to {ys[-1]}"
    if len(ys) <= _LIST_LIMIT:
        return " in " + _join([str(y) for y in ys])
    return f" in {len(ys)} years from {ys[0]} to {ys[-1]}"


def _nth_weekday(p: Pattern) -> str | None:
    """Weeks of the month ANDed with weekdays: "the first Monday", "the last Friday"."""
    if p.day_or or not p.dow_restricted:
        return None
    names = _join([_WEEKDAY[d] for d in sorted(p.weekdays)])
    if p.last_days == frozenset(range(1, 8)):
        return f"the last {names}"
    ds = sorted(p.days)
    if not p.last_days and len(ds) == 7 and ds == list(range(ds[0], ds[0] + 7)):
        nth = _NTH_WEEK.get(ds[0])
        if nth is not None:
            return f"the {nth} {names}"
    return None


def describe(p: Pattern) -> str:
    """A sentence a person would say for `p`, capitalised, without a final period."""
    interval = _interval(p)
    lead = interval if interval is not None else _times(p)
    years = _years(p)
    months_all = p.months == ALL_MONTHS
    of_months = "of every month" if months_all else f"of {_months(p)}"
    in_months = "" if months_all else f" in {_months(p)}"

    if not p.dom_restricted and not p.dow_restricted:
        if interval is not None:
            return f"{lead}{in_months}{years}"
        return f"Every day {lead}{in_months}{years}"
    if not p.dom_restricted:  # weekdays only
        if interval is not None:
            return f"{lead} on {_weekdays_on(p.weekdays)}{in_months}{years}"
        return f"Every {_weekdays_every(p.weekdays)} {lead}{in_months}{years}"
    nth = _nth_weekday(p)
    if nth is not None:
        where = f"on {nth} {of_months}"
    elif not p.dow_restricted:
        if len(p.months) == 1 and len(p.days) == 1 and not p.last_days:
            where = f"on {_MONTH[min(p.months)]} {ordinal(min(p.days))}"
            if p.years is not None and len(p.years) == 1:
                where, years = f"{where}, {min(p.years)}", ""
        else:
            where = f"on {_days_of_month(p)} {of_months}"
    elif p.day_or:
        where = f"on {_days_of_month(p)} {of_months} and on {_weekdays_on(p.weekdays)}"
        if not months_all:
            where = f"on {_days_of_month(p)} and on {_weekdays_on(p.weekdays)} in {_months(p)}"
    else:
        names = _join([_WEEKDAY[d] for d in sorted(p.weekdays)])
        where = f"on {_days_of_month(p)} {of_months} when it is a {names}"
    text = f"{lead} {where}{years}"
    return text[0].upper() + text[1:]
