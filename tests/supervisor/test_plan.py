"""The planner's decisions, with a fixed-period timetable (no processes, no clock)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from routines.runs import parse_slot_id, slot_id
from routines.schedule import Slot
from routines.spec import Missed
from supervisor.engine.plan import GRACE, MISSED_CAP, Action, PlanDecision, plan_routine

T0 = datetime(2026, 12, 2, 6, 0, tzinfo=UTC)


@dataclass
class Every:
    """Slots every `period` from T0, with an optional fixed jitter."""

    period: timedelta
    jitter: timedelta = timedelta(0)
    calls: int = 0

    def slots_between(self, start: datetime, end: datetime, limit: int) -> list[Slot]:
        self.calls += 1
        n = (start - T0) // self.period + 1
        out: list[Slot] = []
        while len(out) < limit:
            t = T0 + n * self.period
            if t > end:
                break
            out.append(Slot(t, t))
            n += 1
        return out

    def fire_time(self, routine_name: str, slot: Slot) -> datetime:
        return slot.instant + self.jitter


Q = timedelta(minutes=15)


def plan(
    table: Every,
    cursor: datetime,
    now: datetime,
    busy: bool | str = False,
    missed: Missed = Missed.CATCH_UP,
) -> list[PlanDecision]:
    return plan_routine(
        table, "r", cursor=cursor, now=now, busy=busy, missed=missed, jitter=table.jitter
    )


def test_nothing_due_before_the_next_slot() -> None:
    assert plan(Every(Q), cursor=T0, now=T0 + Q - timedelta(seconds=1)) == []


def test_an_on_time_slot_runs() -> None:
    [d] = plan(Every(Q), cursor=T0, now=T0 + Q + timedelta(seconds=5))
    assert (d.action, d.slot.instant, d.count, d.detail) == (Action.RUN, T0 + Q, 1, "")


def test_a_slot_exactly_at_the_grace_limit_is_on_time_and_one_past_is_missed() -> None:
    [d] = plan(Every(Q), cursor=T0, now=T0 + Q + GRACE)
    assert d.action is Action.RUN
    [d] = plan(Every(Q), cursor=T0, now=T0 + Q + GRACE + timedelta(seconds=1))
    assert (d.action, d.count, d.detail) == (Action.CATCH_UP, 1, "stands in for 1 missed run")


def test_three_hours_asleep_catch_up_stands_in_for_twelve() -> None:
    [d] = plan(Every(Q), cursor=T0, now=T0 + timedelta(hours=3, minutes=7))
    assert d.action is Action.CATCH_UP
    assert d.count == 12
    assert d.detail == "stands in for 12 missed runs"
    assert d.slot.instant == T0 + timedelta(hours=3)


def test_three_hours_asleep_with_skip_records_one_missed_row() -> None:
    [d] = plan(Every(Q), cursor=T0, now=T0 + timedelta(hours=3, minutes=7), missed=Missed.SKIP)
    assert (d.action, d.count, d.detail) == (Action.MISSED, 12, "12 missed runs")


def test_waking_just_after_a_slot_runs_it_and_it_stands_in_for_the_missed_ones() -> None:
    [d] = plan(Every(Q), cursor=T0, now=T0 + timedelta(hours=1, seconds=30))
    assert (d.action, d.slot.instant, d.count) == (Action.CATCH_UP, T0 + timedelta(hours=1), 4)
    assert d.detail == "stands in for 3 missed runs"


def test_waking_just_after_a_slot_with_skip_records_missed_then_runs() -> None:
    missed, run = plan(
        Every(Q), cursor=T0, now=T0 + timedelta(hours=1, seconds=30), missed=Missed.SKIP
    )
    assert (missed.action, missed.count, missed.slot.instant) == (
        Action.MISSED,
        3,
        T0 + timedelta(minutes=45),
    )
    assert (run.action, run.count, run.slot.instant) == (Action.RUN, 1, T0 + timedelta(hours=1))


def test_busy_routine_skips_and_is_not_caught_up() -> None:
    [d] = plan(Every(Q), cursor=T0, now=T0 + Q + timedelta(seconds=1), busy=True)
    assert (d.action, d.detail) == (Action.SKIPPED, "previous run still going")
    # After recording the skip the cursor is past it: nothing is owed later.
    assert plan(Every(Q), cursor=d.slot.instant, now=T0 + Q + timedelta(minutes=5)) == []


def test_busy_over_many_slots_records_one_skip_with_the_count() -> None:
    [d] = plan(Every(Q), cursor=T0, now=T0 + timedelta(hours=1, minutes=1), busy=True)
    assert (d.action, d.count) == (Action.SKIPPED, 4)
    assert d.detail == "previous run still going (4 slots)"


def test_a_slot_while_a_run_waits_for_a_person_is_skipped_with_that_reason() -> None:
    waiting = "waiting for you on 20261202T060012-r-3f9a1c"
    [d] = plan(Every(Q), cursor=T0, now=T0 + Q + timedelta(seconds=1), busy=waiting)
    assert (d.action, d.detail) == (Action.SKIPPED, waiting)


def test_positive_jitter_delays_the_fire_time_and_lateness_counts_from_it() -> None:
    table = Every(Q, jitter=timedelta(minutes=3))
    assert plan(table, cursor=T0, now=T0 + Q + timedelta(minutes=2)) == []
    [d] = plan(table, cursor=T0, now=T0 + Q + timedelta(minutes=4))
    assert d.action is Action.RUN  # 1 minute after its fire time: on time


def test_negative_jitter_fires_before_the_slot() -> None:
    table = Every(Q, jitter=-timedelta(minutes=2))
    [d] = plan(table, cursor=T0, now=T0 + Q - timedelta(minutes=1))
    assert (d.action, d.slot.instant) == (Action.RUN, T0 + Q)


def test_months_asleep_is_bounded_and_claims_the_newest_slot() -> None:
    table = Every(timedelta(minutes=7))
    now = T0 + timedelta(days=200, minutes=5)  # newest slot at +1 min: 4 min late
    [d] = plan(table, cursor=T0, now=now)
    assert d.action is Action.CATCH_UP
    newest = T0 + ((now - T0) // timedelta(minutes=7)) * timedelta(minutes=7)
    assert d.slot.instant == newest
    assert d.detail == f"stands in for {MISSED_CAP:,}+ missed runs"
    assert table.calls <= 3  # not one call per slot


def test_months_asleep_waking_on_a_slot_runs_it_for_all() -> None:
    table = Every(timedelta(minutes=1))
    [d] = plan(table, cursor=T0, now=T0 + timedelta(days=200, seconds=30))
    assert (d.action, d.slot.instant) == (Action.CATCH_UP, T0 + timedelta(days=200))
    assert d.detail == f"stands in for {MISSED_CAP:,}+ missed runs"


def test_clock_set_back_before_the_cursor_owes_nothing() -> None:
    cursor = T0 + timedelta(hours=5)
    assert plan(Every(Q), cursor=cursor, now=T0 + timedelta(hours=4)) == []


def test_cursor_round_trip() -> None:
    t = datetime(2026, 3, 8, 7, 30, 15, 999, tzinfo=UTC)
    assert parse_slot_id(slot_id(t)) == t.replace(microsecond=0)
    assert slot_id(t) == "2026-03-08T07:30:15Z"


def test_a_small_clock_step_folds_an_on_time_slot_into_the_run_without_calling_it_missed() -> None:
    # Stepped 90 s forward at T0+50s: the T0+1m slot is 80 s late, the T0+2m one 20 s.
    table = Every(timedelta(minutes=1))
    now = T0 + timedelta(seconds=140)
    [d] = plan(table, cursor=T0, now=now)
    assert (d.action, d.count, d.slot.instant) == (Action.RUN, 2, T0 + timedelta(minutes=2))
    assert d.detail == "stands in for 2 slots due at once"
    [d] = plan(table, cursor=T0, now=now, missed=Missed.SKIP)
    assert (d.action, d.count, d.detail) == (
        Action.RUN,
        2,
        "stands in for 2 slots due at once",
    )


def test_late_and_on_time_earlier_slots_are_told_apart() -> None:
    table = Every(timedelta(minutes=1))
    now = T0 + timedelta(minutes=5, seconds=10)  # 1m..3m late; 4m (70 s) on time; 5m newest
    [d] = plan(table, cursor=T0, now=now)
    assert (d.action, d.detail) == (
        Action.CATCH_UP,
        "stands in for 3 missed runs and 1 slot due now",
    )
    missed, run = plan(table, cursor=T0, now=now, missed=Missed.SKIP)
    assert (missed.action, missed.count, missed.slot.instant) == (
        Action.MISSED,
        3,
        T0 + timedelta(minutes=3),
    )
    assert (run.action, run.count, run.detail) == (
        Action.RUN,
        2,
        "stands in for 2 slots due at once",
    )


def test_an_on_time_run_that_covers_missed_slots_is_a_catch_up() -> None:
    # Woken 30 s after a slot, three earlier ones missed: one run, recorded as the catch-up it
    # is (trigger catch_up), not as a plain scheduled run that "also stands in" for them.
    [d] = plan(Every(Q), cursor=T0, now=T0 + timedelta(hours=1, seconds=30))
    assert (d.action, d.count, d.detail) == (Action.CATCH_UP, 4, "stands in for 3 missed runs")
    # Only slots due together, none missed: a plain run.
    [d] = plan(Every(timedelta(minutes=1)), cursor=T0, now=T0 + timedelta(seconds=140))
    assert (d.action, d.count, d.detail) == (Action.RUN, 2, "stands in for 2 slots due at once")
