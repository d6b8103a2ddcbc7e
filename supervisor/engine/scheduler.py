"""The scheduler: keeps each enabled routine's cursor and next fire time, and at every tick turns
`plan_routine`'s decisions into claims in the ledger (the run fence) and pending runs.

Invariants (tests/supervisor/test_scheduler.py):
- A slot becomes a run only through a successful `Ledger.claim`, so it runs at most once, ever,
  whatever restarts, overlapping daemons or clock jumps happen.
- A cursor never moves backwards; enabling a routine, a new routine or an edited schedule start
  from "now" and owe nothing from before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from ipc import Event, RunReply
from routines.ledger import LedgerUnavailable, RoutineState, is_enabled
from routines.ledger.api import LedgerAPI
from routines.runs import RunStatus, Trigger, fingerprint, parse_slot_id, slot_id
from routines.schedule import Schedule, ScheduleError, compile_schedule
from routines.spec import Routine
from routines.spec.registry import Registry
from supervisor.engine.jobs import new_run_id
from supervisor.engine.plan import Action, plan_routine

if TYPE_CHECKING:
    from supervisor.engine.jobs import EventInput
    from supervisor.engine.reply import ReplyTo

__all__ = ["Listener", "Pending", "Scheduler"]

log = logging.getLogger("vinos.scheduler")

# A clock this far behind the cursor was wrong before, not stepped back by NTP; either way a claimed
# slot never runs again (test_scheduler.py::test_the_clock_set_back_never_reruns_a_claimed_slot).
CLOCK_BACK_LIMIT = timedelta(days=1)


class Listener(Protocol):
    """Whoever follows a run's events: a control connection, the in-process CLI."""

    def send(self, msg: Event) -> bool:
        """Deliver one event; False when the listener is gone (it is then dropped)."""
        ...


@dataclass(slots=True)
class Pending:
    """A run admitted to the queue: claimed (scheduled) or recorded (manual), not started."""

    run_id: str
    routine: Routine
    trigger: Trigger
    slot: str | None
    detail: str = ""
    listeners: list[Listener] = field(default_factory=list)  # who follows its events
    on_done: list[asyncio.Future[RunReply]] = field(default_factory=list)  # told how it ended
    reply: ReplyTo | None = None  # trigger "reply": the parent run and the text, for the job
    # after/watch/fire: what the event hands the run (supervisor/engine/triggers.py), for the job
    event: EventInput | None = None
    debug: bool = False  # a manual run asked with VINOS_ROUTINE_DEBUG=1: the job shows each argv
    # The ledger it was claimed in, when the scheduler's (None: the pool's). It differs from the
    # pool's only for the runs a fleet machine makes on its own file while the fleet's database
    # is away (supervisor/fleet/offline.py): those are recorded there, and hold no lease.
    ledger: LedgerAPI | None = field(default=None, compare=False, repr=False)


@dataclass(slots=True)
class _Tracked:
    routine: Routine
    schedule: Schedule
    cursor: datetime
    next_fire: datetime | None


class Scheduler:
    def __init__(self, ledger: LedgerAPI, owner: tuple[int, float]) -> None:
        self.ledger = ledger
        self.owner = owner
        self.tracked: dict[str, _Tracked] = {}
        self.started = False  # after the first sync, newly tracked routines start from now
        # The last `due` stopped at a claim the ledger refused (a full disk, an outage).
        self.full: LedgerUnavailable | None = None
        self.more_due = False  # the last `due` stopped at its claim limit: call again soon

    # -- keeping up with the registry and the ledger --------------------------------------

    def rebase(self, ledger: LedgerAPI) -> None:
        """Claim in `ledger` from now on (a fleet machine's own file while the fleet's database
        is away, and the fleet's again once it is back: supervisor/fleet/offline.py). The
        cursors held are forgotten: the next `sync` starts each routine from `ledger`'s stored
        cursor, as a start does, catching up what was missed by the usual rule
        (tests/supervisor/test_scheduler.py::test_a_rebase_resumes_from_the_new_ledgers_cursors)."""
        self.ledger = ledger
        self.tracked = {}
        self.started = False
        self.full = None
        self.more_due = False

    def sync(
        self,
        registry: Registry,
        states: dict[str, RoutineState],
        now: datetime,
        held: Collection[str] = (),
    ) -> dict[str, str]:
        """Track exactly the enabled routines in force; (re)start cursors as the rules say.
        Returns the routines that were tracked and are now disabled or gone, each with why
        (their queued runs are dropped with it). `held` routines are not tracked (a fleet's:
        pinned to other machines, or divergent); tracked again later, they owe nothing from
        before, like a routine just enabled."""
        wanted: dict[str, Routine] = {}
        disabled: set[str] = set()
        for r in registry.routines():
            if r.name in held:
                continue
            if is_enabled(states, r):
                wanted[r.name] = r
            else:
                disabled.add(r.name)
        turned_off = {
            name: "disabled while queued" if name in disabled else "removed while queued"
            for name in self.tracked
            if name in disabled or registry.get(name) is None
        }
        for name in list(self.tracked):
            if name not in wanted:
                del self.tracked[name]
        for name, routine in wanted.items():
            old = self.tracked.get(name)
            if old is not None and old.routine is routine:
                continue
            if not routine.scheduled:  # [trigger] only: supervisor/engine/triggers.py starts it
                self.tracked.pop(name, None)
                continue
            try:
                schedule = compile_schedule(routine.schedule, routine.kind)
            except ScheduleError as exc:  # e.g. its zone left tzdata since it was loaded
                log.warning("%s: schedule no longer valid: %s", name, exc)
                self.tracked.pop(name, None)
                continue
            state = states.get(name) or RoutineState(name)
            cursor = self._start_cursor(routine, state, now, old)
            self.tracked[name] = _Tracked(routine, schedule, cursor, None)
            self._refresh(name)
        self.started = True
        return turned_off

    def _start_cursor(
        self, routine: Routine, state: RoutineState, now: datetime, old: _Tracked | None
    ) -> datetime:
        fp = fingerprint(routine.schedule)
        if old is not None and fingerprint(old.routine.schedule) == fp:
            return old.cursor  # the file changed, its schedule did not
        stored = parse_slot_id(state.cursor) if state.cursor else None
        if stored is not None and state.schedule_fingerprint == fp and not self.started:
            return stored  # daemon start-up: resume, and catch up what was missed while down
        # A new routine, one just enabled, or a new schedule: it owes nothing from before now.
        start = max(stored, now) if stored is not None else now
        self.ledger.set_cursor(routine.name, slot_id(start), fp)
        return parse_slot_id(slot_id(start))

    def _refresh(self, name: str) -> None:
        t = self.tracked[name]
        t.next_fire = t.schedule.next_fire(name, t.cursor)

    def next_wake(self) -> datetime | None:
        fires = [t.next_fire for t in self.tracked.values() if t.next_fire is not None]
        return min(fires) if fires else None

    def known_fire(self, name: str, routine: Routine, now: datetime) -> datetime | None:
        """The next fire held for `routine` when it equals a fresh `next_fire(name, now)`: the
        same routine object (so the same schedule), no jitter (then a fire is its slot), and
        its cursor <= now < that fire, so no slot lies between the two instants. Else None."""
        t = self.tracked.get(name)
        if t is None or t.routine is not routine or routine.schedule.jitter_sec:
            return None
        nxt = t.next_fire
        return nxt if nxt is not None and t.cursor <= now < nxt else None

    def next_fires(self) -> list[tuple[str, datetime]]:
        out = [(n, t.next_fire) for n, t in self.tracked.items() if t.next_fire is not None]
        return sorted(out, key=lambda x: x[1])

    # -- the tick -------------------------------------------------------------------------

    def _clock_went_back(self, now: datetime) -> None:
        """A cursor more than a day ahead of the clock: the clock was wrong (set years ahead,
        a dead RTC battery) and is right again. Resume from now rather than stay silent until
        that date. Claimed slots still never run again: the claims are the fence; the cursor
        only stops a clock stepped back a little (an NTP step) from owing anything."""
        for name, t in self.tracked.items():
            if t.cursor - now > CLOCK_BACK_LIMIT:
                log.warning(
                    "%s: the clock is %s behind the last slot handled; resuming from now",
                    name,
                    t.cursor - now,
                )
                t.cursor = parse_slot_id(slot_id(now))
                self.ledger.set_cursor(name, slot_id(now))
                self._refresh(name)

    def due(
        self, now: datetime, busy: Callable[[str], bool | str], limit: int | None = None
    ) -> list[Pending]:
        """Claim what is due at `now`; return the runs to queue. Skipped/missed are recorded.

        A claim that finds no space (LedgerUnavailable) claimed nothing: `due` stops there, sets
        `full`, and still returns the runs claimed before it, which must run.
        With `limit`, at most that many routines are claimed for, in the order they are
        tracked, and `more_due` says whether others are still due: the daemon hands these to
        the pool and calls again after its loop has run, so a thousand routines due at once
        never hold the loop (the first runs start, the socket answers) while all are claimed
        (tests/supervisor/test_scheduler.py, bench/bench_flood.py). The order stays fair: a
        routine claimed for is not due again, so the next call goes on with the rest."""
        self._clock_went_back(now)
        self.full = None
        self.more_due = False
        pending: list[Pending] = []
        claimed = 0
        for name, t in list(self.tracked.items()):
            if self.full is not None:
                break
            if t.next_fire is None or t.next_fire > now:
                continue
            if limit is not None and claimed >= limit:
                self.more_due = True
                break
            claimed += 1
            decisions = plan_routine(
                t.schedule,
                name,
                cursor=t.cursor,
                now=now,
                busy=busy(name),
                missed=t.routine.schedule.missed,
                jitter=timedelta(seconds=t.routine.schedule.jitter_sec),
            )
            for d in decisions:
                expect = slot_id(t.cursor)
                run_id = new_run_id(name, now)
                trigger = Trigger.CATCH_UP if d.action is Action.CATCH_UP else Trigger.SCHEDULE
                status = {
                    Action.RUN: RunStatus.QUEUED,
                    Action.CATCH_UP: RunStatus.QUEUED,
                    Action.MISSED: RunStatus.MISSED,
                    Action.SKIPPED: RunStatus.SKIPPED,
                }[d.action]
                try:
                    won = self.ledger.claim(
                        name,
                        d.slot.id,
                        run_id=run_id,
                        trigger=trigger,
                        status=status,
                        now=now,
                        detail=d.detail,
                        owner=self.owner,
                        expect_cursor=expect,
                    )
                except LedgerUnavailable as exc:
                    self.full = exc  # the cursor stays: the slot is planned again next tick
                    break
                if not won:
                    # Someone else acted on this routine (another process on this ledger):
                    # adopt the ledger's cursor and plan again next tick.
                    state = self.ledger.state(name)
                    if state.cursor:
                        t.cursor = max(t.cursor, parse_slot_id(state.cursor))
                    log.info("%s: slot %s already handled elsewhere", name, d.slot.id)
                    break
                t.cursor = max(t.cursor, d.slot.instant)
                if status is RunStatus.QUEUED:
                    pending.append(
                        Pending(run_id, t.routine, trigger, d.slot.id, d.detail, ledger=self.ledger)
                    )
                else:
                    log.info("%s: slot %s %s: %s", name, d.slot.id, status, d.detail)
            self._refresh(name)
        return pending
