"""Where the daemon's runs are recorded and fenced: the `Site` seam.

`main()` chooses the variant once, at the edge: `LocalSite` (this machine's SQLite ledger) or
`FleetSite` (a fleet's PostgreSQL, supervisor/fleet/site.py, loaded only with config.toml's
[fleet]). The loop (supervisor/daemon.py) calls this interface and never asks which one it has.
A Site offers the ledger, the files whose identity the daemon keeps checking, the routines held
back from this machine and those busy elsewhere, what to do while the ledger is unavailable,
its background tasks, a stop, and close.

Invariant: LocalSite adds nothing to the loop's own decisions: nothing is held, nothing runs
elsewhere, an unavailable ledger is only a pause (tests/supervisor/test_daemon_tick.py).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from routines.ledger import Ledger, LedgerUnavailable, RoutineState
from routines.ledger.api import Store
from routines.spec.config import Config
from routines.spec.paths import Paths
from routines.spec.registry import Registry
from supervisor.engine.owner import FileId, Locks, held_files

if TYPE_CHECKING:
    from ipc import FleetStatus
    from supervisor.engine.finish import Notification
    from supervisor.engine.pool import LeaseDeadlines, Pool

__all__ = ["Guarded", "LocalSite", "Seen", "Site"]


@dataclass(frozen=True, slots=True)
class Seen:
    """What the loop last read, for a Site that schedules beside it (a fleet's offline mode):
    the registry in force, the routine states as last read, and the scheduler's cursors."""

    registry: Registry
    states: Mapping[str, RoutineState]
    cursors: Mapping[str, datetime]


@dataclass(frozen=True, slots=True)
class Guarded:
    """The files whose identity the daemon keeps checking (supervisor/engine/health.py), and the
    ledger file to add once it is opened (a ledger that could not be opened at start)."""

    held: dict[Path, FileId]
    ledger: tuple[Path, Callable[[], FileId | None]] | None


class Site(Protocol):
    ledger: Store
    # "Yours until" for each run's worker (a fleet's leases), or None: no fence.
    fence: LeaseDeadlines | None

    def guarded(self) -> Guarded: ...

    def bind(
        self,
        *,
        pool: Pool,
        owner: tuple[int, float],
        notify: Callable[[Notification], None],
        wake: Callable[[], None],
    ) -> None:
        """Told the daemon's pool and hooks, once, before the first tick."""
        ...

    def reconfigure(self, config: Config) -> None:
        """A reload's settings, for what the site holds of config (a fleet's offline pool)."""
        ...

    def join(self) -> None:
        """At start, before the loop: take this daemon's identity. MachineInUse when another
        live daemon holds it; LedgerUnavailable is an outage the loop waits out."""
        ...

    def resume(self, now: datetime) -> bool:
        """At each tick's start: whatever must happen before claims. True when routine states
        changed (re-read them); LedgerUnavailable while claims must wait."""
        ...

    def refresh(self, registry: Registry) -> Mapping[str, str]:
        """The routines held back from this machine (name → why), for this registry."""
        ...

    def busy(self, name: str) -> bool:
        """Whether `name` runs beside the daemon's pool: by the site itself, or on another
        machine (overlap is site-wide). Asked at each decision, so a view the site cannot
        refresh (an outage) may lapse (supervisor/fleet/site.py)."""
        ...

    def unavailable(
        self, exc: LedgerUnavailable, seen: Seen, now: datetime, busy: Callable[[str], bool]
    ) -> None:
        """A tick found the ledger unavailable (the daemon has paused)."""
        ...

    def next_wake(self) -> datetime | None:
        """While paused: the earliest run the site itself has due."""
        ...

    def tasks(self, refuse: Callable[[str], None]) -> list[Coroutine[Any, Any, None]]:
        """Background work for the daemon's lifetime (cancelled at its stop). `refuse`: stop
        the daemon, saying why (another daemon holds its identity)."""
        ...

    async def stop(self, seen: Seen, grace: float) -> None:
        """At a clean stop, after the pool's shutdown."""
        ...

    def close(self) -> None: ...

    def status(self) -> FleetStatus | None:
        """What `status` shows of the fleet, or None for one machine."""
        ...


class LocalSite:
    """One machine: its SQLite ledger, nothing held, nothing elsewhere."""

    fence: LeaseDeadlines | None = None

    def __init__(self, paths: Paths, locks: Locks | None = None) -> None:
        self.paths = paths
        self.locks = locks
        # Opened (created) before its identity is taken; one that cannot be opened yet (a
        # full disk, a read-only file) is a pause the ticks retry, not a failed start.
        self._ledger = Ledger(paths.ledger, wait=True)
        self.ledger: Store = self._ledger

    def guarded(self) -> Guarded:
        local = self._ledger
        held = held_files(self.paths.ledger, self.locks)
        return Guarded(held, (self.paths.ledger, lambda: local.opened_id))

    def bind(
        self,
        *,
        pool: Pool,
        owner: tuple[int, float],
        notify: Callable[[Notification], None],
        wake: Callable[[], None],
    ) -> None:
        pass

    def reconfigure(self, config: Config) -> None:
        pass  # the pool and housekeeping are the daemon's; nothing here holds config

    def join(self) -> None:
        pass

    def resume(self, now: datetime) -> bool:
        return False

    def refresh(self, registry: Registry) -> Mapping[str, str]:
        return {}

    def busy(self, name: str) -> bool:
        return False

    def unavailable(
        self, exc: LedgerUnavailable, seen: Seen, now: datetime, busy: Callable[[str], bool]
    ) -> None:
        pass  # a pause; the ticks retry (supervisor/engine/health.py says it)

    def next_wake(self) -> datetime | None:
        return None

    def tasks(self, refuse: Callable[[str], None]) -> list[Coroutine[Any, Any, None]]:
        return []

    async def stop(self, seen: Seen, grace: float) -> None:
        pass

    def close(self) -> None:
        self._ledger.close()

    def status(self) -> FleetStatus | None:
        return None
