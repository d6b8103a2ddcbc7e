"""A fleet machine's Site (supervisor/engine/site.py): the fleet's PostgreSQL ledger, the routines
held back from here and busy elsewhere (supervisor/fleet/member.py), the lease heartbeat and its
fence, and, while the database is away, the offline mode (supervisor/fleet/offline.py): the loop
calls these through the Site interface and never asks which site it has.

Loaded only with config.toml's [fleet] (psycopg with it).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Coroutine, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ipc import FleetStatus, lease_clock
from routines.ledger import LedgerError, LedgerUnavailable, Unavailable
from routines.ledger.api import Store
from routines.spec.config import Config
from routines.spec.paths import Paths
from routines.spec.registry import Registry
from supervisor.engine.clock import Clock
from supervisor.engine.owner import Locks, held_files, version
from supervisor.engine.site import Guarded, Seen
from supervisor.engine.spawn import Spawner
from supervisor.fleet.member import START_DEADLINE_SEC, Fleet
from supervisor.fleet.offline import Offline
from supervisor.fleet.plan import elsewhere_lapsed
from supervisor.timings import Timings

if TYPE_CHECKING:
    from supervisor.engine.finish import Notification
    from supervisor.engine.pool import LeaseDeadlines, Pool

__all__ = ["FleetSite"]

log = logging.getLogger("vinos.fleet")


class FleetSite:
    def __init__(
        self,
        paths: Paths,
        config: Config,
        *,
        clock: Clock,
        timings: Timings,
        locks: Locks | None = None,
        spawner: Spawner | None = None,
    ) -> None:
        assert config.fleet is not None
        self.paths = paths
        self.config = config
        self.clock = clock
        self.locks = locks
        self.spawner = spawner
        self.fleet = Fleet(config.fleet, version(), clock.now, timings)
        self.ledger: Store = self.fleet.ledger
        self.fence: LeaseDeadlines | None = self.fleet.book
        self._away_since: float | None = None  # lease clock; the database away since then
        self.offline: Offline | None = None  # set by `bind`: it needs the daemon's hooks

    def guarded(self) -> Guarded:
        held = held_files(self.paths.ledger, self.locks)
        held.pop(self.paths.ledger, None)  # this machine's old SQLite file is not the ledger now
        return Guarded(held, None)

    def bind(
        self,
        *,
        pool: Pool,
        owner: tuple[int, float],
        notify: Callable[[Notification], None],
        wake: Callable[[], None],
    ) -> None:
        self.fleet.on_renewal = pool.leases_renewed  # fenced runs (supervisor/fleet/member.py)
        self.fleet.on_back = wake  # write the results kept through an outage at once
        self.offline = Offline(
            paths=self.paths,
            config=self.config,
            clock=self.clock,
            owner=owner,
            machine=self.fleet.machine,
            notify=notify,
            wake=wake,
            spawner=self.spawner,
        )

    def reconfigure(self, config: Config) -> None:
        """local_when_unreachable, and the offline pool's settings (max_concurrent, each
        job's); the database and machine name take effect at the daemon's restart."""
        self.config = config
        if self.offline is not None:
            self.offline.reconfigure(config)

    def join(self) -> None:
        # One daemon per fleet machine name; while the database is away, at its return (an
        # outage at start: the loop waits for the database, as for any outage).
        with contextlib.suppress(LedgerUnavailable):
            self.fleet.join(wait=START_DEADLINE_SEC)

    def resume(self, now: datetime) -> bool:
        offline = self._offline()
        if self._away_since is None and not offline.pending:
            return False
        _ = self.fleet.ledger.data_version  # LedgerUnavailable while it is still away
        self._away_since = None
        if not offline.pending:
            return False
        offline.back(self.fleet.ledger, now)  # DRAINING meanwhile
        return True  # the copy moved cursors: read the states again

    def refresh(self, registry: Registry) -> Mapping[str, str]:
        self.fleet.refresh(registry)  # publish definitions; hold pinned and divergent ones
        return self.fleet.held

    def busy(self, name: str) -> bool:
        """Running offline here, or on another machine as last seen (overlap is fleet-wide)
        until the database has been away longer than that run's lease could last."""
        if self.offline is not None and self.offline.busy(name):
            return True
        if name not in self.fleet.elsewhere:
            return False
        return not elsewhere_lapsed(self._away_since, lease_clock(), self.fleet.timings)

    def unavailable(
        self, exc: LedgerUnavailable, seen: Seen, now: datetime, busy: Callable[[str], bool]
    ) -> None:
        """The fleet's database away: run here what may run offline
        (supervisor/fleet/offline.py)."""
        if self._away_since is None:
            self._away_since = lease_clock()
        offline = self._offline()
        if exc.reason is Unavailable.UNREACHABLE:
            registry = seen.registry
            if not registry.entries:  # started while the database was away: never refreshed
                from routines.spec.registry import scan

                registry = scan(self.paths, registry)
            offline.start(registry, self.fleet.held, seen.states, seen.cursors, now)
        offline.tick(now, busy)

    def next_wake(self) -> datetime | None:
        return self.offline.next_wake() if self.offline is not None else None

    def tasks(self, refuse: Callable[[str], None]) -> list[Coroutine[Any, Any, None]]:
        return [self.fleet.heartbeat(refuse)]

    async def stop(self, seen: Seen, grace: float) -> None:
        offline = self._offline()
        if offline.pool is not None:
            await offline.pool.shutdown(grace)  # copied in at next start
        try:
            offline.remember(seen.registry, self.fleet.held, seen.states, seen.cursors)
        except LedgerError as exc:  # a full disk: the next start begins from now
            log.warning("the cursors for an offline start were not kept: %s", exc)

    def close(self) -> None:
        self.fleet.close()
        if self.offline is not None:
            self.offline.close()

    def status(self) -> FleetStatus | None:
        return FleetStatus(
            machine=self.fleet.machine,
            held=dict(sorted(self.fleet.held.items())),
            elsewhere=dict(sorted(self.fleet.elsewhere.items())),
        )

    def _offline(self) -> Offline:
        assert self.offline is not None, "FleetSite.bind comes before the first tick"
        return self.offline
