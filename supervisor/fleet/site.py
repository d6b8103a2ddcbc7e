"""A fleet machine: its Site (supervisor/engine/site.py) and the rest of its part, `Member`.

`FleetSite` is what the loop calls through the Site seam, as it calls `LocalSite`: the fleet's
PostgreSQL ledger (claims, and leases made with them), the lease fence, and who else is busy
(another machine, by its live lease; another process here). `Member` is everything else a
fleet machine does, which one machine has no part of: it joins the fleet under its machine
name, renews its leases (the heartbeat, supervisor/fleet/member.py), holds back the routines
pinned elsewhere or divergent, runs offline while the database is away
(supervisor/fleet/offline.py, through the daemon's one scheduler and pool), and says the
fleet's picture in `status`. The daemon starts it beside the engine when config.toml has
[fleet] (supervisor/daemon.py `compose`).

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
from supervisor.engine.owner import Locks, held_files, others_running, version
from supervisor.engine.site import Guarded
from supervisor.fleet.member import START_DEADLINE_SEC, Fleet
from supervisor.fleet.offline import Loop, Offline
from supervisor.fleet.plan import elsewhere_lapsed
from supervisor.timings import Timings

if TYPE_CHECKING:
    from supervisor.engine.pool import LeaseDeadlines

__all__ = ["FleetSite", "Member"]

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
    ) -> None:
        assert config.fleet is not None
        self.paths = paths
        self.locks = locks
        self.fleet = Fleet(config.fleet, version(), clock.now, timings)
        self.ledger: Store = self.fleet.ledger
        self.fence: LeaseDeadlines | None = self.fleet.book
        self.away_since: float | None = None  # lease clock; the database away since then
        self._others: frozenset[str] = frozenset()  # run by another live process here

    def guarded(self) -> Guarded:
        held = held_files(self.paths.ledger, self.locks)
        held.pop(self.paths.ledger, None)  # this machine's old SQLite file is not the ledger now
        return Guarded(held, None)

    def refresh(self, registry: Registry) -> Mapping[str, str]:
        self.fleet.refresh(registry)  # publish definitions; hold pinned and divergent ones
        self._others = others_running(self.ledger)  # this machine's runs only
        return self.fleet.held

    def busy(self, name: str) -> bool:
        """Running in another process here, or on another machine as last seen (overlap is
        fleet-wide) until the database has been away longer than that run's lease could last."""
        if name in self._others:
            return True
        if name not in self.fleet.elsewhere:
            return False
        return not elsewhere_lapsed(self.away_since, lease_clock(), self.fleet.timings)

    def close(self) -> None:
        self.fleet.close()


class Member:
    """A fleet machine's own part, beside the daemon's loop (which calls it at a tick's start,
    on an outage, while paused, at its stop, and for `status`)."""

    def __init__(self, site: FleetSite, loop: Loop) -> None:
        self.site = site
        self.fleet = site.fleet
        self.loop = loop
        self.fleet.on_renewal = loop.pool.leases_renewed  # fenced runs (member.py)
        self.fleet.on_back = loop.wake  # write the results kept through an outage at once
        self.offline = Offline(paths=site.paths, loop=loop, machine=self.fleet.machine)

    def join(self) -> None:
        """At start, before the loop: take this daemon's identity; MachineInUse when another
        live daemon holds it. While the database is away, at its return (an outage at start:
        the loop waits for the database, as for any outage)."""
        with contextlib.suppress(LedgerUnavailable):
            self.fleet.join(wait=START_DEADLINE_SEC)

    def resume(self, now: datetime) -> bool:
        """At each tick's start, before claims: once the database is back, end offline mode
        (copy its runs in). True when routine states changed (re-read them);
        LedgerUnavailable while claims must wait."""
        offline = self.offline
        if self.site.away_since is None and not offline.pending:
            return False
        _ = self.fleet.ledger.data_version  # LedgerUnavailable while it is still away
        self.site.away_since = None
        if not offline.pending:
            return False
        offline.back(self.fleet.ledger, now)  # DRAINING meanwhile
        return True  # the copy moved cursors: read the states again

    def unavailable(
        self, exc: LedgerUnavailable, now: datetime, busy: Callable[[str], bool]
    ) -> None:
        """A tick found the ledger unavailable (the daemon has paused): run here what may run
        offline (supervisor/fleet/offline.py)."""
        if self.site.away_since is None:
            self.site.away_since = lease_clock()
        if exc.reason is Unavailable.UNREACHABLE:
            self.offline.start(self.fleet.held, now)
        self.offline.tick(now, busy)

    def next_wake(self) -> datetime | None:
        """While paused: the earliest run due offline."""
        return self.offline.next_wake()

    def tasks(self, refuse: Callable[[str], None]) -> list[Coroutine[Any, Any, None]]:
        """The heartbeat, for the daemon's lifetime. `refuse`: stop the daemon, saying why
        (another daemon holds its machine name)."""
        return [self.fleet.heartbeat(refuse)]

    def stop(self) -> None:
        """At a clean stop, after the pool's shutdown: keep the offline cursors."""
        try:
            self.offline.remember(self.fleet.held)  # copied in at next start
        except LedgerError as exc:  # a full disk: the next start begins from now
            log.warning("the cursors for an offline start were not kept: %s", exc)

    def close(self) -> None:
        self.offline.close()

    def status(self) -> FleetStatus:
        return FleetStatus(
            machine=self.fleet.machine,
            held=dict(sorted(self.fleet.held.items())),
            elsewhere=dict(sorted(self.fleet.elsewhere.items())),
        )
