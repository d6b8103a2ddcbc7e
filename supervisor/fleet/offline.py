"""A fleet machine cut off from its database (README "Several machines").

While PostgreSQL is unreachable the fleet's schedule is paused (fail closed). The routines that
may still run here (supervisor/fleet/plan.py `runs_offline`: pinned to this machine alone, or
any this machine may run when `[fleet] local_when_unreachable = true`) are scheduled against
this machine's own SQLite ledger instead: its own fence and cursors, each cursor seeded with
the latest this machine saw (the fleet's, its own scheduler's, the file's), so no slot this
machine handled runs again. When the database is back and those runs have ended, they are
copied in by routines/ledger/fleetjoin.py's copy (by run id: nothing lost, nothing counted twice;
their slots claimed; a shared cursor only moves forward, GREATEST under the row lock), and only
then does the fleet's schedule resume: its scheduler's next claim finds the cursor moved and
adopts it (the compare-and-set), so a slot run offline is not run again by this machine.

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

from routines.ledger import Ledger, LedgerUnavailable, RoutineState, Unavailable
from routines.ledger.postgres import PgLedger
from routines.runs import fingerprint, parse_slot_id, slot_id
from routines.safetext import one_line
from routines.spec import Routine
from routines.spec.config import Config
from routines.spec.paths import Paths
from routines.spec.registry import Registry
from supervisor.engine.clock import Clock
from supervisor.engine.finish import Notification
from supervisor.engine.pool import Pool
from supervisor.engine.scheduler import Scheduler
from supervisor.engine.spawn import Spawner
from supervisor.fleet.plan import runs_offline

__all__ = ["Offline"]

log = logging.getLogger("vinos.fleet")

MARKER = "fleet-offline"


class Offline:
    def __init__(
        self,
        *,
        paths: Paths,
        config: Config,
        clock: Clock,
        owner: tuple[int, float],
        machine: str,
        notify: Callable[[Notification], None],
        wake: Callable[[], None],
        spawner: Spawner | None,
    ) -> None:
        self.paths = paths
        self.config = config
        self.clock = clock
        self.owner = owner
        self.machine = machine
        self.notify = notify
        self.wake = wake
        self.spawner = spawner  # the daemon's: the same workers, offline or not
        self.marker = paths.state_dir / MARKER
        self.ledger: Ledger | None = None
        self.scheduler: Scheduler | None = None  # set while scheduling here
        self.pool: Pool | None = None
        self.owed = self.marker.exists()  # runs made offline wait to be copied in
        self._draining = False  # said that the fleet waits for runs made offline
        self._ended = False  # a run made here ended: look for a third strike
        self._reasons: dict[str, str | None] = {}  # disabled_reason when scheduling began

    # -- while the database is away -------------------------------------------------------

    def start(
        self,
        registry: Registry,
        held: Collection[str],
        seen: Mapping[str, RoutineState],
        cursors: Mapping[str, datetime],
        now: datetime,
    ) -> None:
        """Schedule here the routines that may run offline (none: stay fail closed).
        `seen`: the fleet's routine states as last read; `cursors`: the fleet scheduler's."""
        if self.scheduler is not None:
            return
        routines = self._eligible(registry, held)
        if not routines:
            return
        ledger = self._open()
        states = self._seed(ledger, routines, seen, cursors)
        self._reasons = {name: ledger.state(name).disabled_reason for name in states}
        self._mark()
        self.scheduler = Scheduler(ledger, self.owner)
        skipped = {r.name for r in registry.routines()} - set(states)
        self.scheduler.sync(registry, states, now, skipped)
        self.pool = Pool(
            ledger=ledger,
            paths=self.paths,
            config=self.config,
            clock=self.clock,
            notify=self.notify,
            on_change=self._run_ended,
            spawner=self.spawner,
        )
        names = ", ".join(one_line(n) for n in sorted(states))
        why = (
            f"running {names} on this machine while the fleet database is unreachable (its "
            "own ledger; its runs join the fleet's history when the database is back)"
        )
        if self.config.fleet is not None and self.config.fleet.local_when_unreachable:
            why += ": local_when_unreachable accepts that another machine may run a slot too"
        log.warning("%s", why)
        self.notify(Notification("vinos-routine: running routines offline", why))

    def reconfigure(self, config: Config) -> None:
        """A reload: which routines may run offline from the next start of scheduling here,
        and the offline pool's settings now (a larger max_concurrent starts queued runs)
        (tests/fleet/test_fleet_outage_end.py::test_reload_reaches_the_offline_pool)."""
        self.config = config
        if self.pool is not None:
            self.pool.config = config
            self.pool.admit()

    @property
    def pending(self) -> bool:
        """Scheduling here, or runs made here wait to be copied in."""
        return self.scheduler is not None or self.owed

    def remember(
        self,
        registry: Registry,
        held: Collection[str],
        seen: Mapping[str, RoutineState],
        cursors: Mapping[str, datetime],
    ) -> None:
        """At a clean stop: keep the cursors of what may run offline in this machine's file,
        so a start while the database is away resumes from them (without them it would start
        from now: a slot due meanwhile is not run, never run twice)."""
        if self.scheduler is not None:
            return  # the file has them
        routines = self._eligible(registry, held)
        if routines:
            self._seed(self._open(), routines, seen, cursors)
            self.close()

    def _eligible(self, registry: Registry, held: Collection[str]) -> list[Routine]:
        allowed = bool(self.config.fleet and self.config.fleet.local_when_unreachable)
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

    def _run_ended(self) -> None:
        self._ended = True
        self.wake()

    def tick(self, now: datetime, busy: Callable[[str], bool]) -> None:
        if self.scheduler is None or self.pool is None or self.ledger is None:
            return
        if self._ended:  # the third strike disables a routine here, for the outage
            self._ended = False
            for name in list(self.scheduler.tracked):
                reason = self.ledger.state(name).disabled_reason
                if reason is not None and reason != self._reasons.get(name):
                    del self.scheduler.tracked[name]
                    log.warning("%s: not run offline any more: %s", one_line(name), reason)
        for pending in self.scheduler.due(now, busy):
            self.pool.enqueue(pending)
        if self.scheduler.full is not None:  # this machine's disk: retried next tick
            log.error("offline: %s", self.scheduler.full)

    def next_wake(self) -> datetime | None:
        return None if self.scheduler is None else self.scheduler.next_wake()

    def busy(self, name: str) -> bool:
        return self.pool is not None and self.pool.busy(name)

    # -- the database is back ---------------------------------------------------------------

    def back(self, fleet: PgLedger, now: datetime) -> None:
        """Stop scheduling here; once the runs made here have ended, copy them in.
        LedgerUnavailable (DRAINING) while some are still going, (UNREACHABLE) if the database
        went again."""
        from routines.ledger.fleetjoin import join

        self.scheduler = None
        if self.pool is not None and (self.pool.running or self.pool.queue):
            why = (
                f"the fleet database is back; {len(self.pool.running) + len(self.pool.queue)} "
                "run(s) started while it was unreachable are still going: the fleet's schedule "
                "resumes once they have ended and are copied in"
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
        self.pool = None
        self.close()
        said = (
            f"the fleet database is back: {report.runs} run(s) made meanwhile on this machine "
            "copied into the fleet's history; the fleet's schedule resumes"
        )
        log.warning("%s", said)
        self.notify(Notification("vinos-routine: offline runs synced", said))

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
