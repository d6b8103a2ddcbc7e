"""Schedules: next_after for 10,000 mixed routines against croniter's get_next on the same cron
expressions (same run, same base), and the cost of catching up after a 90-day sleep.

Mixed: a third each written as cron, as the OnCalendar line it translates to, and as a
plain-language phrase; five zones. The baseline holds one croniter per routine, built beforehand
in the routine's zone, and times only `set_current(base)` + `get_next()`; building them (what
evaluating a cron string from scratch costs) is shown for context.
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

from bench.common import Row, median_seconds
from routines.schedule import Schedule, compile_schedule
from routines.schedule.translate import translate_cron
from routines.spec import Kind, ScheduleSpec

ZONES = ("UTC", "America/New_York", "Europe/Berlin", "Asia/Tokyo", "Australia/Lord_Howe")
BASE = datetime(2026, 3, 28, 23, 59, 17, tzinfo=UTC)  # a weekend with two DST changes
DAYS = ("sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday")


def _routine(rng: random.Random) -> tuple[str, str, str]:
    """(cron, the same as a phrase, kind of shape)."""
    h, m = rng.randrange(24), rng.randrange(0, 60, 5)
    shape = rng.randrange(8)
    ampm = f"{h % 12 or 12}:{m:02d}{'am' if h < 12 else 'pm'}"
    if shape == 0:
        return f"{m} {h} * * *", f"every day at {h}:{m:02d}", "daily"
    if shape == 1:
        return f"{m} {h} * * 1-5", f"every weekday at {ampm}", "weekdays"
    if shape == 2:
        n = rng.choice((15, 20, 30))
        return f"*/{n} * * * *", f"every {n} minutes", "minutes"
    if shape == 3:
        n = rng.choice((1, 2, 3, 4, 6, 8, 12))
        return f"0 */{n} * * *", f"every {n} hours", "hours"
    if shape == 4:
        d = rng.randrange(1, 29)
        suffix = {1: "st", 2: "nd", 3: "rd", 21: "st", 22: "nd", 23: "rd"}.get(d, "th")
        return f"{m} {h} {d} * *", f"every month on the {d}{suffix} at {h}:{m:02d}", "monthly"
    if shape == 5:
        a, b = sorted(rng.sample(range(7), 2))
        return f"{m} {h} * * {a},{b}", f"every {DAYS[a]} and {DAYS[b]} at {ampm}", "two days"
    if shape == 6:
        d = rng.randrange(7)
        return f"{m} {h} * * {d}", f"every {DAYS[d]} at {h}:{m:02d}", "weekly"
    return (
        f"{m} {h},{(h + 12) % 24} * * *",
        f"every day at {h}:{m:02d} and {(h + 12) % 24}:{m:02d}",
        "twice",
    )


def _routines(n: int) -> list[tuple[Schedule, str]]:
    rng = random.Random(20260328)
    out = []
    for i in range(n):
        expr, phrase, _ = _routine(rng)
        zone = ZONES[i % len(ZONES)]
        form = i % 3
        if form == 0:
            spec = ScheduleSpec(cron=expr, timezone=zone)
        elif form == 1:
            (line,) = translate_cron(expr)
            spec = ScheduleSpec(oncalendar=line, timezone=zone)
        else:
            spec = ScheduleSpec(every=phrase, timezone=zone)
        out.append((compile_schedule(spec, Kind.AGENT), expr))
    return out


def _next_after_rows(quick: bool) -> list[Row]:
    n = 2_000 if quick else 10_000
    repeat = 3 if quick else 7
    t0 = time.perf_counter()
    routines = _routines(n)
    compile_s = time.perf_counter() - t0
    iters = [
        croniter(expr, BASE.astimezone(ZoneInfo(s.zone)), implement_cron_bug=True)
        for s, expr in routines
    ]
    for (s, _), it in zip(routines, iters, strict=True):
        if s.zone == "UTC":  # the same work: the same answers (no DST to disagree about)
            got = s.next_after(BASE)
            assert got is not None and got.instant == it.get_next(datetime).astimezone(UTC)
    local_bases = [BASE.astimezone(ZoneInfo(s.zone)) for s, _ in routines]

    def ours() -> None:
        for s, _ in routines:
            s.next_after(BASE)

    def theirs() -> None:
        for it, b in zip(iters, local_bases, strict=True):
            it.set_current(b)
            it.get_next(datetime)

    def theirs_from_scratch() -> None:
        for (_, expr), b in zip(routines, local_bases, strict=True):
            croniter(expr, b, implement_cron_bug=True).get_next(datetime)

    ours_s = median_seconds(ours, repeat)
    theirs_s = median_seconds(theirs, repeat)
    scratch_s = median_seconds(theirs_from_scratch, max(1, repeat // 2))
    ratio = ours_s / theirs_s
    return [
        Row(
            f"schedule: next_after, {n:,} mixed routines",
            ours_s * 1000,
            "ms",
            baseline=f"croniter get_next: {theirs_s * 1000:,.1f} ms",
            ratio=ratio,
            target="<= 1.5x",
            met=ratio <= 1.5,
        ),
        Row(
            f"schedule: croniter from scratch, {n:,} (context)",
            scratch_s * 1000,
            "ms",
        ),
        Row(f"schedule: compile {n:,} routines (cached after)", compile_s * 1000, "ms"),
    ]


def _catch_up_rows(quick: bool) -> list[Row]:
    repeat = 3 if quick else 5
    s = compile_schedule(
        ScheduleSpec(cron="*/15 * * * *", timezone="America/New_York", jitter_sec=300),
        Kind.COMMAND,
    )
    start = datetime(2026, 1, 10, 8, 3, tzinfo=UTC)
    end = start + timedelta(days=90)  # across the spring change

    def slots() -> None:
        assert len(s.slots_between(start, end, 10_001)) == 8640

    def count() -> None:
        assert s.count_between(start, end, 10**6) == 8640

    all_slots = s.slots_between(start, end, 10_001)

    def fire_times() -> None:
        for x in all_slots:
            s.fire_time("poller", x)

    slots_s = median_seconds(slots, repeat)
    count_s = median_seconds(count, repeat)
    fire_s = median_seconds(fire_times, max(1, repeat // 2))
    return [
        Row(
            "schedule: slots_between, 90 days of */15 (8,640)",
            slots_s * 1000,
            "ms",
            target="< 500 ms",
            met=slots_s < 0.5,
        ),
        Row(
            "schedule: count_between, 90 days of */15",
            count_s * 1000,
            "ms",
            baseline=f"slots_between: {slots_s * 1000:,.1f} ms",
            ratio=count_s / slots_s,
            target="< 5 ms",
            met=count_s < 0.005,
        ),
        Row("schedule: fire_time (jitter 5m) x 8,640", fire_s * 1000, "ms"),
    ]


def run(quick: bool) -> list[Row]:
    return _next_after_rows(quick) + _catch_up_rows(quick)
