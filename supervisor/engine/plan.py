"""Pure scheduling decisions: which slots of a routine are due now, and what to do with them.

Nothing here sleeps, reads the clock or touches the ledger: the daemon passes `now`, the
routine's cursor and whether it is busy, and carries out the decisions (claiming each slot in
the ledger, which is the fence). See tests/supervisor/test_plan.py.

Rules (each table-tested in tests/supervisor/test_plan.py):
- A slot is due when its fire time (slot + jitter) is at or before `now`, and it is after the
  cursor (the latest slot already handled). Lateness is `now - fire time` in UTC instants.
- A due slot more than 120 s late was missed. `catch_up` runs once for all of them ("stands in
  for N missed runs"); `skip` records one `missed` row with the count.
- When the newest due slot is on time it runs; older late slots make it the catch-up that
  stands in for them (catch_up), or one `missed` row before it (skip). Older slots still on
  time (a clock stepped < 120 s) are due with it, never missed.
- Due while the routine runs or waits in the queue: one `skipped` row, never caught up.
- Counting is bounded: after months asleep the count stops at MISSED_CAP.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol

from routines.schedule import Slot
from routines.spec import Missed

__all__ = [
    "GRACE",
    "MISSED_CAP",
    "Action",
    "PlanDecision",
    "Timetable",
    "plan_routine",
]

GRACE = timedelta(seconds=120)
MISSED_CAP = 10_000
# How far after a slot its jitter may move it; the planner looks this far past `now`.
_MAX_JITTER = timedelta(hours=24)


class Timetable(Protocol):
    """What the planner needs of a compiled schedule (routines.schedule.Schedule)."""

    def slots_between(self, start: datetime, end: datetime, limit: int) -> list[Slot]: ...

    def fire_time(self, routine_name: str, slot: Slot) -> datetime: ...


class Action(StrEnum):
    RUN = "run"  # an on-time slot: start a run (trigger schedule)
    CATCH_UP = "catch_up"  # late slots, missed = catch_up: one run for all (trigger catch_up)
    MISSED = "missed"  # late slots, missed = skip: one `missed` row with the count
    SKIPPED = "skipped"  # due while the routine still runs or waits: one `skipped` row


@dataclass(frozen=True, slots=True)
class PlanDecision:
    action: Action
    slot: Slot  # the slot claimed: the newest one the decision covers
    count: int  # how many slots it covers
    detail: str


def _runs(n: int, capped: bool) -> str:
    if capped:
        return f"{MISSED_CAP:,}+ missed runs"
    return "1 missed run" if n == 1 else f"{n:,} missed runs"


def _due(
    table: Timetable, name: str, cursor: datetime, now: datetime, jitter: timedelta
) -> tuple[list[Slot], bool]:
    """Due slots after the cursor, oldest first, and whether the count hit the cap.

    When capped, the list holds the first MISSED_CAP due slots and then the newest due slot.
    """
    horizon = now + min(abs(jitter), _MAX_JITTER)
    slots = table.slots_between(cursor, horizon, MISSED_CAP + 1)
    due = [s for s in slots if table.fire_time(name, s) <= now]
    if len(slots) <= MISSED_CAP:
        return due, False
    # Asleep for ages: find the newest due slot by looking back from now in growing windows,
    # instead of walking every slot since the cursor.
    for window in (timedelta(hours=2), timedelta(days=2), timedelta(days=40), timedelta(days=800)):
        start = max(cursor, now - window)
        tail = table.slots_between(start, horizon, MISSED_CAP)
        tail_due = [s for s in tail if table.fire_time(name, s) <= now]
        if tail_due and len(tail) < MISSED_CAP:
            return [*due[:MISSED_CAP], tail_due[-1]], True
    return due[: MISSED_CAP + 1], True


def plan_routine(
    table: Timetable,
    name: str,
    *,
    cursor: datetime,
    now: datetime,
    busy: bool | str,
    missed: Missed,
    jitter: timedelta = timedelta(0),
) -> list[PlanDecision]:
    """What to do for one enabled routine at `now`; [] when nothing is due.

    Decisions come in the order they must be claimed (each moves the cursor forward).
    `busy` as a string is why the slot is skipped ("waiting for you on RUN": a paused run).
    """
    due, capped = _due(table, name, cursor, now, jitter)
    if not due:
        return []
    newest = due[-1]
    count = len(due)
    if busy:
        detail = busy if isinstance(busy, str) else "previous run still going"
        if count > 1:
            detail += f" ({count:,}{'+' if capped else ''} slots)"
        return [PlanDecision(Action.SKIPPED, newest, count, detail)]
    on_time = now - table.fire_time(name, newest) <= GRACE
    if on_time:
        earlier = due[:-1]
        if not earlier:
            return [PlanDecision(Action.RUN, newest, 1, "")]
        # Earlier slots still within the grace (a clock stepped < 120 s, or jitter) were not
        # missed: the run folds them in. Only late ones are missed.
        late = [s for s in earlier if now - table.fire_time(name, s) > GRACE]
        folded = len(earlier) - len(late)
        together = f"stands in for {1 + folded} slots due at once" if folded else ""
        if missed is Missed.SKIP or not late:
            run = PlanDecision(Action.RUN, newest, 1 + folded, together)
            if not late:
                return [run]
            return [PlanDecision(Action.MISSED, late[-1], len(late), _runs(len(late), capped)), run]
        # A run that stands in for missed slots is a catch-up, whatever else is due with it,
        # and its trigger says so (test_an_on_time_run_that_covers_missed_slots_is_a_catch_up).
        detail = f"stands in for {_runs(len(late), capped)}"
        if folded:
            detail += f" and {folded} slot{'s' if folded > 1 else ''} due now"
        return [PlanDecision(Action.CATCH_UP, newest, count, detail)]
    if missed is Missed.SKIP:
        return [PlanDecision(Action.MISSED, newest, count, _runs(count, capped))]
    return [PlanDecision(Action.CATCH_UP, newest, count, f"stands in for {_runs(count, capped)}")]
