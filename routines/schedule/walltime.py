"""A pattern's wall-clock times as UTC instants in a zone, under the DST rule
(tests/routines/schedule/test_dst.py).

The rule (one place, tested in tests/routines/schedule/test_dst.py):

* A wall time that does not exist (spring forward) runs once, at the first instant after the
  gap, when the hour field is fixed; several such times, and a real time at the end of the
  gap, share that one instant. When the hour field is `*` or a step (`Pattern.elapsed`),
  slots follow elapsed time: gap times simply do not happen.
* A wall time that occurs twice (fall back) runs once, at its first occurrence, when the hour
  field is fixed; with `*` or a step it runs at both occurrences.

systemd agrees on the repeated hour for fixed hours but skips a fixed-hour time in the gap
(we run it late: a missed morning brief is worse than a late one) and runs a `*` hour only
in the first pass of a repeated hour. Every function takes and returns aware datetimes; the
loops work on naive UTC internally because that is where the time goes.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from routines.schedule.pattern import Pattern

__all__ = [
    "count_instants",
    "first_instant_of_day",
    "instants_of",
    "next_instant",
]

_ONE_DAY = timedelta(days=1)
_FULL_DAY = timedelta(days=1)
_EPS = timedelta(microseconds=1)
_SECOND = timedelta(seconds=1)


def _gap_end(wall: datetime, zone: ZoneInfo, before: timedelta, after: timedelta) -> datetime:
    """The first instant (naive UTC) after the gap that swallows `wall`.

    The offset changes from `before` to `after` somewhere in (wall - after, wall - before];
    tzdata transitions fall on whole seconds, so a bisection over seconds finds it.
    """
    lo = wall - after  # still the old offset
    hi = wall - before  # already the new offset
    while hi - lo > _SECOND:
        mid = lo + timedelta(seconds=((hi - lo) // _SECOND) // 2)
        if mid.replace(tzinfo=UTC).astimezone(zone).utcoffset() == before:
            lo = mid
        else:
            hi = mid
    return hi


def _instants(wall: datetime, zone: ZoneInfo, elapsed: bool) -> tuple[datetime, ...]:
    """The naive-UTC instants at which the naive `wall` fires, in order."""
    first = wall.replace(tzinfo=zone).utcoffset()
    second = wall.replace(tzinfo=zone, fold=1).utcoffset()
    assert first is not None and second is not None
    if first == second:
        return (wall - first,)
    if first > second:  # repeated: fold 0 is the first pass (the larger, pre-change offset)
        return (wall - first, wall - second) if elapsed else (wall - first,)
    if elapsed:  # in the gap: elapsed time never reaches this wall time
        return ()
    return (_gap_end(wall, zone, first, second),)


def instants_of(wall: datetime, zone: ZoneInfo, elapsed: bool) -> tuple[datetime, ...]:
    """The UTC instants at which a matching naive wall time fires under the DST rule."""
    return tuple(i.replace(tzinfo=UTC) for i in _instants(wall, zone, elapsed))


def _next(pattern: Pattern, zone: ZoneInfo, t: datetime) -> datetime | None:
    """`next_instant` on a naive UTC `t`, returning naive UTC."""
    local = t.replace(tzinfo=UTC).astimezone(zone)
    wall = local.replace(tzinfo=None, fold=0)
    scan_from = wall
    horizon = None
    if local.fold == 0:
        offset = local.utcoffset()
        other = local.replace(fold=1).utcoffset()
        assert offset is not None and other is not None
        if other < offset:
            # t is in the first pass of a repeated interval: earlier wall times still have
            # their second pass ahead, and later ones their first, so look at the whole
            # interval (at most `delta` either side of `wall`) before choosing.
            delta = offset - other
            scan_from = wall - delta
            horizon = wall + delta
    best: datetime | None = None
    cursor = scan_from
    elapsed = pattern.elapsed
    while True:
        got = pattern.next_wall(cursor)
        if got is None:
            return best
        cursor = got
        for inst in _instants(cursor, zone, elapsed):
            if inst > t and (best is None or inst < best):
                best = inst
        # Outside a repeated interval wall order is instant order, so the first hit is it.
        if best is not None and (horizon is None or cursor > horizon):
            return best


def next_instant(pattern: Pattern, zone: ZoneInfo, t: datetime) -> datetime | None:
    """The first instant strictly after the aware `t` at which `pattern` fires in `zone`."""
    got = _next(pattern, zone, t.astimezone(UTC).replace(tzinfo=None))
    return None if got is None else got.replace(tzinfo=UTC)


def _day_start(zone: ZoneInfo, day: date) -> tuple[datetime, bool]:
    """The first instant (naive UTC) of local `day`, and whether that is a real midnight."""
    midnight = datetime(day.year, day.month, day.day)
    first = midnight.replace(tzinfo=zone).utcoffset()
    second = midnight.replace(tzinfo=zone, fold=1).utcoffset()
    assert first is not None and second is not None
    if first < second:  # no midnight that day (Asia/Hebron 2022-03-27)
        return _gap_end(midnight, zone, first, second), False
    return midnight - first, True


def first_instant_of_day(zone: ZoneInfo, day: date) -> datetime:
    """The first instant whose local date is `day` (its midnight, or the end of a gap)."""
    return _day_start(zone, day)[0].replace(tzinfo=UTC)


def count_instants(
    pattern: Pattern, zone: ZoneInfo, start: datetime, end: datetime, cap: int
) -> int:
    """How many instants in (start, end], stopping at `cap`.

    Whole days without a UTC-offset change are counted from the pattern's fields (a date
    check), so a 15-minute schedule over 90 days costs about 90 date checks, not 8,640 steps.
    """
    lo = start.astimezone(UTC).replace(tzinfo=None)
    hi = end.astimezone(UTC).replace(tzinfo=None)
    n = 0
    if hi <= lo or cap <= 0:
        return 0

    def step_until(cursor: datetime, stop: datetime) -> tuple[datetime, bool]:
        """Count instants in (cursor, stop]; returns the last one and whether more may follow."""
        nonlocal n
        while n < cap:
            got = _next(pattern, zone, cursor)
            if got is None:
                return cursor, False
            if got > stop:
                return cursor, True
            n += 1
            cursor = got
        return cursor, False

    day = lo.replace(tzinfo=UTC).astimezone(zone).date() + _ONE_DAY
    boundary, at_midnight = _day_start(zone, day)
    _, more = step_until(lo, min(hi, boundary - _EPS))
    if not more or boundary > hi:
        return min(n, cap)
    per_day = pattern.per_day
    while n < cap:
        following, next_at_midnight = _day_start(zone, day + _ONE_DAY)
        if following - _EPS > hi:
            break
        if at_midnight and following - boundary == _FULL_DAY:
            if pattern.matches_date(day):
                n += per_day
        else:  # a UTC-offset change that day: step through it
            _, more = step_until(boundary - _EPS, following - _EPS)
            if not more:
                return min(n, cap)
        day, boundary, at_midnight = day + _ONE_DAY, following, next_at_midnight
    if n < cap:
        step_until(boundary - _EPS, hi)
    return min(n, cap)
