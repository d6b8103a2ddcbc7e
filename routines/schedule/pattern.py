"""Which wall-clock times a schedule matches: field sets, with no time zone and no DST.

cron (`routines.schedule.cron`), OnCalendar (`routines.schedule.oncalendar`) and plain language
(through cron) all compile to a `Pattern`. `routines.schedule.walltime` maps its wall times to UTC
instants in a zone under the DST rule (tests/routines/schedule/test_dst.py). Everything here works
on naive wall
times, so a day without a midnight (Asia/Hebron) or a repeated hour is not this module's concern.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import lru_cache

__all__ = [
    "ALL_DAYS",
    "ALL_HOURS",
    "ALL_MINUTES",
    "ALL_MONTHS",
    "ALL_SECONDS",
    "ALL_WEEKDAYS",
    "MAX_YEAR",
    "MIN_YEAR",
    "Pattern",
    "days_in_month",
    "runs",
]

MIN_YEAR = 1970
MAX_YEAR = 2199  # systemd computes no elapse after 2199; neither do we

ALL_SECONDS = tuple(range(60))
ALL_MINUTES = tuple(range(60))
ALL_HOURS = tuple(range(24))
ALL_DAYS = frozenset(range(1, 32))
ALL_WEEKDAYS = frozenset(range(7))  # Monday = 0 … Sunday = 6, as date.weekday()
ALL_MONTHS = frozenset(range(1, 13))

_ONE_DAY = timedelta(days=1)
_DAYS = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def days_in_month(year: int, month: int) -> int:
    if month == 2 and year % 4 == 0 and (year % 100 != 0 or year % 400 == 0):
        return 29
    return _DAYS[month]


@lru_cache(maxsize=1024)
def _next_table(values: tuple[int, ...], size: int) -> tuple[int, ...]:
    """t[x] is the smallest value >= x in `values`, or -1; x in 0..size (t[size] is -1)."""
    allowed = set(values)
    out = [-1] * (size + 1)
    nxt = -1
    for x in range(size - 1, -1, -1):
        if x in allowed:
            nxt = x
        out[x] = nxt
    return tuple(out)


@dataclass(frozen=True)
class Pattern:
    """A set of wall-clock times: every combination of the fields, on the matching dates.

    A date matches when its month and year match and its day matches: day of month AND day of
    week, or (cron's rule, `day_or`) day of month OR day of week.
    """

    hours: tuple[int, ...]  # sorted
    minutes: tuple[int, ...]  # sorted
    seconds: tuple[int, ...] = (0,)  # sorted
    days: frozenset[int] = ALL_DAYS  # day of month, counted from the 1st
    # Counted from the end (1 = the last day), systemd's `~`; used instead of `days` when set.
    last_days: frozenset[int] = frozenset()
    weekdays: frozenset[int] = ALL_WEEKDAYS
    months: frozenset[int] = ALL_MONTHS
    years: frozenset[int] | None = None  # None: any year up to MAX_YEAR
    day_or: bool = False  # cron: day of month OR day of week (both fields restricted)
    # The hour field is * or a step: across DST, slots follow elapsed time (gap times are
    # skipped, both passes of a repeated hour run) instead of wall-clock time.
    elapsed: bool = False

    _nh: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _nm: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _ns: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _month_days: tuple[frozenset[int], ...] = field(init=False, repr=False, compare=False)
    _next_day: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)
    _next_month: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _years: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _every_day: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        assert self.hours and self.minutes and self.seconds and self.months and self.weekdays
        assert self.days or self.last_days
        assert self.hours[0] >= 0 and self.hours[-1] <= 23
        assert self.minutes[0] >= 0 and self.minutes[-1] <= 59
        assert self.seconds[0] >= 0 and self.seconds[-1] <= 59
        if self.day_or and (self.days == ALL_DAYS and not self.last_days):
            # "1-31 OR Monday" is every day: keep the meaning, drop the OR.
            object.__setattr__(self, "weekdays", ALL_WEEKDAYS)
        if self.day_or and self.weekdays == ALL_WEEKDAYS:
            object.__setattr__(self, "days", ALL_DAYS)
            object.__setattr__(self, "last_days", frozenset())
            object.__setattr__(self, "day_or", False)
        s = object.__setattr__
        s(self, "_nh", _next_table(self.hours, 24))
        s(self, "_nm", _next_table(self.minutes, 60))
        s(self, "_ns", _next_table(self.seconds, 60))
        month_days = []
        for length in (28, 29, 30, 31):
            if self.last_days:
                ds = frozenset(length + 1 - k for k in self.last_days if k <= length)
            else:
                ds = frozenset(d for d in self.days if d <= length)
            month_days.append(ds)
        s(self, "_month_days", tuple(month_days))
        s(self, "_next_day", tuple(_next_table(tuple(sorted(ds)), 32) for ds in month_days))
        s(self, "_next_month", _next_table(tuple(sorted(self.months)), 13))
        s(self, "_years", tuple(sorted(self.years)) if self.years is not None else ())
        s(
            self,
            "_every_day",
            self.years is None
            and self.months == ALL_MONTHS
            and not self.dom_restricted
            and not self.dow_restricted,
        )

    # -- what it restricts (descriptions and the translator read these) --

    @property
    def dom_restricted(self) -> bool:
        return bool(self.last_days) or self.days != ALL_DAYS

    @property
    def dow_restricted(self) -> bool:
        return self.weekdays != ALL_WEEKDAYS

    @property
    def per_day(self) -> int:
        """Wall times on a matching day."""
        return len(self.hours) * len(self.minutes) * len(self.seconds)

    # -- matching --

    def matches_date(self, day: date) -> bool:
        return self._day_ok(day.year, day.month, day.day)

    def _day_ok(self, y: int, m: int, d: int) -> bool:
        if self._every_day:
            return True
        if m not in self.months or (self.years is not None and y not in self.years):
            return False
        dom = d in self._month_days[days_in_month(y, m) - 28]
        if not self.dow_restricted:
            return dom
        dow = date(y, m, d).weekday() in self.weekdays
        return (dom or dow) if self.day_or else (dom and dow)

    def _time_at_or_after(self, h: int, m: int, s: int) -> tuple[int, int, int] | None:
        """The first matching time of day at or after h:m:s (s may be 60), or None."""
        nh = self._nh[h]
        if nh < 0:
            return None
        if nh > h:
            return nh, self.minutes[0], self.seconds[0]
        nm = self._nm[m]
        if nm == m:
            ns = self._ns[s]
            if ns >= 0:
                return h, m, ns
            nm = self._nm[m + 1]
        if nm >= 0:
            return h, nm, self.seconds[0]
        nh = self._nh[h + 1]
        if nh < 0:
            return None
        return nh, self.minutes[0], self.seconds[0]

    def next_date(self, day: date) -> date | None:
        """The first matching date at or after `day`, or None (none up to MAX_YEAR)."""
        y, m, d = day.year, day.month, day.day
        while y <= MAX_YEAR:
            if self.years is not None and y not in self.years:
                i = bisect.bisect_right(self._years, y)
                if i == len(self._years):
                    return None
                y, m, d = self._years[i], 1, 1
            if m not in self.months:
                nm = self._next_month[m]
                if nm < 0:
                    y, m, d = y + 1, 1, 1
                    continue
                m, d = nm, 1
            length = days_in_month(y, m)
            if not self.dow_restricted:
                nd = self._next_day[length - 28][d]
                if nd > 0:
                    return date(y, m, nd)
            else:
                dom_days = self._month_days[length - 28]
                wd = date(y, m, d).weekday()
                for dd in range(d, length + 1):
                    dom = dd in dom_days
                    dow = wd in self.weekdays
                    if (dom or dow) if self.day_or else (dom and dow):
                        return date(y, m, dd)
                    wd = 0 if wd == 6 else wd + 1
            m, d = m + 1, 1
            if m > 12:
                y, m = y + 1, 1
        return None

    def next_wall(self, after: datetime) -> datetime | None:
        """The first matching wall time strictly after the naive `after` (whole seconds)."""
        y, mo, d = after.year, after.month, after.day
        tod = self._time_at_or_after(after.hour, after.minute, after.second + 1)
        if tod is not None and self._day_ok(y, mo, d):
            return datetime(y, mo, d, tod[0], tod[1], tod[2])
        if (y, mo, d) >= (MAX_YEAR, 12, 31):
            return None
        nd = self.next_date(date(y, mo, d) + _ONE_DAY)
        if nd is None:
            return None
        return datetime(nd.year, nd.month, nd.day, self.hours[0], self.minutes[0], self.seconds[0])

    # -- spacing (the frequency rule) --

    def min_gap_seconds(self) -> int | None:
        """The shortest wall-clock distance between two matches; None when at least a day.

        Judged on wall-clock time: a DST change can bring two slots closer once a year.
        """

        def least(values: tuple[int, ...]) -> int:
            return min(b - a for a, b in itertools.pairwise(values))

        s, mi, h = self.seconds, self.minutes, self.hours
        gaps = []
        if len(s) > 1:
            gaps.append(least(s))
        if len(mi) > 1:
            gaps.append(least(mi) * 60 - (s[-1] - s[0]))
        if len(h) > 1:
            gaps.append(least(h) * 3600 - ((mi[-1] * 60 + s[-1]) - (mi[0] * 60 + s[0])))
        spread = (h[-1] - h[0]) * 3600 + (mi[-1] - mi[0]) * 60 + (s[-1] - s[0])
        if spread > 0 and self._has_consecutive_days():
            gaps.append(86400 - spread)  # the last time of one day to the first of the next
        return min(gaps) if gaps else None

    def _has_consecutive_days(self) -> bool:
        """Whether two matching dates can follow each other (sampled over 28 years)."""
        if self._every_day:
            return True
        day = self.next_date(date(2000, 1, 1))
        if day is None:
            return False
        end = date(min(day.year + 28, MAX_YEAR), 1, 1)  # weekdays and leap years repeat
        while day is not None and day < end:
            nxt = self.next_date(day + _ONE_DAY)
            if nxt is not None and (nxt - day).days == 1:
                return True
            day = nxt
        return False


def runs(values: list[int]) -> list[tuple[int, int]]:
    """Sorted values as (first, last) runs of consecutive numbers: [1,2,3,7] → [(1,3),(7,7)]."""
    out: list[tuple[int, int]] = []
    for v in values:
        if out and v == out[-1][1] + 1:
            out[-1] = (out[-1][0], v)
        else:
            out.append((v, v))
    return out
