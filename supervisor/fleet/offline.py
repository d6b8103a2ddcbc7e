"""A fleet machine cut off from its database (README "Several machines").

While PostgreSQL is unreachable the fleet's schedule is paused (fail closed). The routines that
may still run here (supervisor/fleet/plan.py `runs_offline`: pinned to this machine alone, or
any this machine may run when `[fleet] local_when_unreachable = true`) are scheduled against
this machine's own SQLite ledger instead: its own fence and cursors, each cursor seeded with
the latest this machine saw (the fleet's, its own scheduler's, the file's), so no slot this
machine handled runs again. The daemon's one Scheduler claims there (`Scheduler.rebase`) and
its one Pool runs them (each run recorded in the file it was claimed in, holding no lease), so
a reload reaches them as it reaches every run, and `max_concurrent` counts all of this
machine's runs (tests/fleet/test_fleet_outage_end.py::test_reload_reaches_the_offline_pool).

When the database is back and those runs have ended, they are copied in by
routines/ledger/fleetjoin.py's copy (by run id: nothing lost, nothing counted twice; their
slots claimed; a shared cursor only moves forward, GREATEST under the row lock), and only then
does the fleet's schedule resume: the scheduler, rebased on the fleet's ledger, starts from
the cursors the copy moved, so a slot run offline is not run again by this machine.

A marker file (state/fleet-offline) says runs wait to be copied, so a daemon stopped before the
database came back copies them at its next start.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from typing import Protocol

from routines.ledger import Ledger, LedgerUnavailable, RoutineState, Unavailable
from routines.ledger.postgres import PgLedger
from routines.runs import fingerprint, parse_slot_id, slot_id
from routines.safetext import one_line
from routines.spec import Routine
from routines.spec.config import Config
from routines.spec.paths import Paths
from routines.spec.registry import Registry, scan
from supervisor.engine.finish import Notification
from supervisor.engine.pool import Pool
from supervisor.engine.scheduler import Scheduler
from supervisor.fleet.plan import runs_offline

__all__ = ["Loop", "Offline"]

log = logging.getLogger("vinos.fleet")

MARKER = "fleet-offline"


class Loop(Protocol):
    """What a fleet machine's own code sees of the daemon it runs beside (supervisor/daemon.py):
    the settings in force, the files and routine states as last read, its one scheduler and
    pool, and its hooks."""

    @property
    def config(self) -> Config: ...

    @property
    def registry(self) -> Registry: ...

    @property
    def states(self) -> Mapping[str, RoutineState]: ...

    @property
    def scheduler(self) -> Scheduler: ...

    @property
    def pool(self) -> Pool: ...

    def wake(self) -> None: ...

    def tell(self, note: Notification) -> None: ...


class Offline:
    def __init__(self, *, paths: Paths, loop: Loop, machine: str) -> None:
        self.paths = paths
        self.loop = loop
        self.machine = machine
        self.marker = paths.state_dir / MARKER
        self.ledger: Ledger | None = None
        self.scheduling = False  # the loop's scheduler claims in this machine's file
        self.owed = self.marker.exists()  # runs made offline wait to be copied in
        self._draining = False  # said that the fleet waits for runs made offline
        self._reasons: dict[str, str | None] = {}  # disabled_reason when scheduling began

    # -- while the database is away -------------------------------------------------------

    def start(self, held: Collection[str], now: datetime) -> None:
        """Schedule here the routines that may run offline (none: stay fail closed), from the
        fleet's routine states as last read and the loop's scheduler's cursors."""
        if self.scheduling:
            return
        registry = self.loop.registry
        if not registry.entries:  # started while the database was away: never refreshed
            registry = scan(self.paths, registry)
        routines = self._eligible(registry, held)
        if not routines:
            return
        scheduler = self.loop.scheduler
        cursors = {n: t.cursor for n, t in scheduler.tracked.items()}
        ledger = self._open()
        states = self._seed(ledger, routines, self.loop.states, cursors)
        self._reasons = {name: ledger.state(name).disabled_reason for name in states}
        self._mark()
        scheduler.rebase(ledger)
        skipped = {r.name for r in registry.routines()} - set(states)
        scheduler.sync(registry, states, now, skipped)
        self.scheduling = True
        names = ", ".join(one_line(n) for n in sorted(states))
        why = (
            f"running {names} on this machine while the fleet database is unreachable (its "
            "own ledger; its runs join the fleet's history when the database is back)"
        )
        fleet = self.loop.config.fleet
        if fleet is not None and fleet.local_when_unreachable:
            why += ": local_when_unreachable accepts that another machine may run a slot too"
        log.warning("%s", why)
        self.loop.tell(Notification("vinos-routine: running routines offline", why))

    @property
    def pending(self) -> bool:
        """Scheduling here, or runs made here wait to be copied in."""
        return self.scheduling or self.owed

    def remember(self, held: Collection[str]) -> None:
        """At a clean stop: keep the cursors of what may run offline in this machine's file,
        so a start while the database is away resumes from them (without them it would start
        from now: a slot due meanwhile is not run, never run twice)."""
        if self.scheduling:
            return  # the file has them
        routines = self._eligible(self.loop.registry, held)
        if routines:
            cursors = {n: t.cursor for n, t in self.loop.scheduler.tracked.items()}
            self._seed(self._open(), routines, self.loop.states, cursors)
            self.close()

    def _eligible(self, registry: Registry, held: Collection[str]) -> list[Routine]:
        fleet = self.loop.config.fleet  # as last reloaded
        allowed = bool(fleet and fleet.local_when_unreachable)
        return [
            r
            for r in registry.routines()
            if r.name not in held and runs_offline(r.machines, self.machine, allowed)
        ]

    @staticmethod
    def _seed(
        ledger: Ledger,
        routines: list[Routine],
        seen: Mapping[str, RoutineState],
        cursors: Mapping[str, datetime],
    ) -> dict[str, RoutineState]:
        """Each routine's state to schedule from, its cursor the latest slot known handled:
        the fleet's as last read, this machine's scheduler's, or this file's; written here."""
        states: dict[str, RoutineState] = {}
        for r in routines:
            fleet_state = seen.get(r.name) or RoutineState(r.name)
            here = ledger.state(r.name).cursor
            known = [parse_slot_id(c) for c in (fleet_state.cursor, here) if c]
            if r.name in cursors:
                known.append(cursors[r.name])
            if fleet_state.failure_streak != ledger.state(r.name).failure_streak:
                ledger.set_failure_streak(r.name, fleet_state.failure_streak)  # strikes go on
            cursor, fp = None, None
            if known:  # resume from the latest slot handled (a catch-up follows the usual rule)
                cursor, fp = slot_id(max(known)), fingerprint(r.schedule)
                if cursor != here:
                    ledger.set_cursor(r.name, cursor, fp)
            states[r.name] = dataclasses.replace(
                fleet_state, cursor=cursor, schedule_fingerprint=fp
            )
        return states

    def tick(self, now: datetime, busy: Callable[[str], bool]) -> None:
        if not self.scheduling or self.ledger is None:
            return
        scheduler = self.loop.scheduler
        # The third strike disables a routine here, for the outage (read each tick: the file's
        # states are few, and a run's end only wakes the loop).
        for name in list(scheduler.tracked):
            reason = self.ledger.state(name).disabled_reason
            if reason is not None and reason != self._reasons.get(name):
                del scheduler.tracked[name]
                log.warning("%s: not run offline any more: %s", one_line(name), reason)
        for pending in scheduler.due(now, busy):
            self.loop.pool.enqueue(pending)
        if scheduler.full is not None:  # this machine's disk: retried next tick
            log.error("offline: %s", scheduler.full)

    def next_wake(self) -> datetime | None:
        return self.loop.scheduler.next_wake() if self.scheduling else None

    # -- the database is back ---------------------------------------------------------------

    def back(self, fleet: PgLedger, now: datetime) -> None:
        """Stop scheduling here (the loop's scheduler claims in the fleet's ledger again, from
        its cursors); once the runs made here have ended, copy them in.
        LedgerUnavailable (DRAINING) while some are still going, (UNREACHABLE) if the database
        went again."""
        from routines.ledger.fleetjoin import join

        if self.scheduling:
            self.loop.scheduler.rebase(fleet)
            self.scheduling = False
        going = self.loop.pool.recording_in(self.ledger) if self.ledger is not None else 0
        if going:
            why = (
                f"the fleet database is back; {going} run(s) started while it was unreachable "
                "are still going: the fleet's schedule resumes once they have ended and are "
                "copied in"
            )
            if not self._draining:
                log.warning("%s", why)
                self._draining = True
            # The fleet's schedule waits until they have ended and are copied in.
            raise LedgerUnavailable(Unavailable.DRAINING, why)
        self._draining = False
        report = join(fleet, self._open(), now)
        self.marker.unlink(missing_ok=True)
        self.owed = False
        self.close()
        said = (
            f"the fleet database is back: {report.runs} run(s) made meanwhile on this machine "
            "copied into the fleet's history; the fleet's schedule resumes"
        )
        log.warning("%s", said)
        self.loop.tell(Notification("vinos-routine: offline runs synced", said))

    # -- files ----------------------------------------------------------------------------------

    def _open(self) -> Ledger:
        if self.ledger is None:
            self.ledger = Ledger(self.paths.ledger)
        return self.ledger

    def _mark(self) -> None:
        self.paths.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.close(os.open(self.marker, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
        self.owed = True

    def close(self) -> None:
        if self.ledger is not None:
            with contextlib.suppress(Exception):
                self.ledger.close()
            self.ledger = None
