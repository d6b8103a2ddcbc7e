"""Where the daemon's runs are recorded and fenced: the `Site` seam.

A Site is what differs between one machine and a fleet, and nothing else: the ledger that
claims a slot and releases a run (`finish_run`), the lease that fences a run's worker, and who
else is busy. `main()` chooses the variant once, at the edge: `LocalSite` (this machine's SQLite
ledger) or `FleetSite` (a fleet's PostgreSQL, supervisor/fleet/site.py, loaded only with
config.toml's [fleet]). The loop (supervisor/daemon.py) calls this interface and never asks
which one it has. What else a fleet machine does (join, the heartbeat, offline mode, its
status) is the fleet's own code, which the daemon starts beside the engine with [fleet]
(supervisor/fleet/site.py `Member`); one machine has none of it, and stubs none of it.

Invariant: LocalSite adds nothing to the loop's own decisions but overlap across processes:
nothing is held, and busy elsewhere is another live process's run on this ledger
(tests/supervisor/test_site.py, tests/supervisor/test_daemon_tick.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from routines.ledger import Ledger
from routines.ledger.api import Store
from routines.spec.paths import Paths
from routines.spec.registry import Registry
from supervisor.engine.owner import FileId, Locks, held_files, others_running

if TYPE_CHECKING:
    from supervisor.engine.pool import LeaseDeadlines

__all__ = ["Guarded", "LocalSite", "Site"]


@dataclass(frozen=True, slots=True)
class Guarded:
    """The files whose identity the daemon keeps checking (supervisor/engine/health.py), and the
    ledger file to add once it is opened (a ledger that could not be opened at start)."""

    held: dict[Path, FileId]
    ledger: tuple[Path, Callable[[], FileId | None]] | None


class Site(Protocol):
    # Claims (the run fence) and run rows: a run is released by its `finish_run`.
    ledger: Store
    # "Yours until" for each run's worker (a fleet's leases), or None: no lease.
    fence: LeaseDeadlines | None

    def guarded(self) -> Guarded: ...

    def refresh(self, registry: Registry) -> Mapping[str, str]:
        """Read who else is busy, with the routine states; the routines held back from this
        machine (name → why: a fleet's pinned elsewhere and divergent ones) for this registry."""
        ...

    def busy(self, name: str) -> bool:
        """Whether `name` runs outside the daemon's pool: in another live process here, or on
        another machine (overlap is site-wide). Asked at each decision, so a view the site
        cannot refresh (an outage) may lapse (supervisor/fleet/site.py)."""
        ...

    def close(self) -> None: ...


class LocalSite:
    """One machine: its SQLite ledger, no lease; busy elsewhere is another process here."""

    fence: LeaseDeadlines | None = None

    def __init__(self, paths: Paths, locks: Locks | None = None) -> None:
        self.paths = paths
        self.locks = locks
        # Opened (created) before its identity is taken; one that cannot be opened yet (a
        # full disk, a read-only file) is a pause the ticks retry, not a failed start.
        self._ledger = Ledger(paths.ledger, wait=True)
        self.ledger: Store = self._ledger
        self._others: frozenset[str] = frozenset()

    def guarded(self) -> Guarded:
        local = self._ledger
        held = held_files(self.paths.ledger, self.locks)
        return Guarded(held, (self.paths.ledger, lambda: local.opened_id))

    def refresh(self, registry: Registry) -> Mapping[str, str]:
        self._others = others_running(self.ledger)
        return {}  # one machine holds nothing back

    def busy(self, name: str) -> bool:
        return name in self._others

    def close(self) -> None:
        self._ledger.close()
