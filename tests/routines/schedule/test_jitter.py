"""Jitter: a deterministic offset per (routine, slot), uniform in ±jitter, that never reaches
the routine's next slot nor goes back to its previous one, and keeps runs in slot order (the
planner claims the newest due slot: a later slot firing first would orphan an earlier one)."""

from __future__ import annotations

import statistics
from datetime import UTC, datetime, timedelta

from routines.schedule import Schedule, compile_schedule
from routines.spec import Kind, ScheduleSpec

START = datetime(2026, 1, 1, tzinfo=UTC)


def sched(expr: str, jitter: int, zone: str = "UTC") -> Schedule:
    return compile_schedule(ScheduleSpec(cron=expr, timezone=zone, jitter_sec=jitter), Kind.COMMAND)


def offsets(s: Schedule, name: str, n: int) -> list[float]:
    slots = s.slots_between(START, START + timedelta(days=3650), n)
    return [(s.fire_time(name, x) - x.instant).total_seconds() for x in slots]


def test_no_jitter_fires_on_the_slot() -> None:
    s = sched("0 6 * * *", 0)
    slot = s.next_after(START)
    assert slot is not None and s.fire_time("day-brief", slot) == slot.instant


def test_the_offset_is_a_function_of_routine_and_slot_only() -> None:
    a = sched("0 6 * * *", 300)
    slot = a.next_after(START)
    assert slot is not None
    first = a.fire_time("day-brief", slot)
    # A restart compiles again and gets the same answer; another routine gets another one.
    b = compile_schedule(
        ScheduleSpec(cron="0 6 * * *", timezone="UTC", jitter_sec=300, allow_frequent=True),
        Kind.COMMAND,
    )
    assert b is not a and b.fire_time("day-brief", slot) == first
    assert first.tzinfo is UTC
    assert offsets(a, "day-brief", 50) != offsets(a, "inbox-triage", 50)


def test_offsets_are_spread_uniformly_over_plus_minus_jitter() -> None:
    got = offsets(sched("0 6 * * *", 300), "day-brief", 2000)
    assert all(-300 <= o <= 300 and o == int(o) for o in got)
    assert min(got) < -280 and max(got) > 280  # reaches both ends
    assert abs(statistics.mean(got)) < 15  # centred (uniform: sd of the mean ~3.9 s)
    quarters = [sum(1 for o in got if lo <= o < lo + 150) for lo in (-300, -150, 0, 150)]
    assert all(420 <= q <= 580 for q in quarters), quarters  # ~500 each


def test_never_at_or_past_the_next_slot_nor_before_the_previous() -> None:
    s = sched("*/15 * * * *", 3600)  # jitter larger than the spacing
    slots = s.slots_between(START, START + timedelta(days=2), 500)
    fires = [s.fire_time("poller", x) for x in slots]
    for prev, nxt, fire in zip(slots, slots[2:], fires[1:], strict=False):
        assert prev.instant < fire < nxt.instant
    assert fires == sorted(fires) and len(set(fires)) == len(fires)
    assert any(f < x.instant for f, x in zip(fires, slots, strict=True))
    assert any(f > x.instant for f, x in zip(fires, slots, strict=True))


def test_the_window_holds_across_a_dst_change() -> None:
    s = sched("*/30 * * * *", 3600, "America/New_York")
    start = datetime(2026, 11, 1, 3, tzinfo=UTC)
    slots = s.slots_between(start, start + timedelta(hours=6), 100)
    fires = [s.fire_time("poller", x) for x in slots]
    for prev, nxt, fire in zip(slots, slots[2:], fires[1:], strict=False):
        assert prev.instant < fire < nxt.instant
    assert fires == sorted(fires)
