"""What the daemon does when its ground moves: its ledger or a lock file deleted or replaced,
or a ledger that takes no reads or writes for a while (a full disk, a read-only file, an I/O
error, a lock held past the busy timeout, damage, a fleet's database out of reach). Each is
said once, loudly (the log and a desktop notification), held while it lasts, and undone when
it passes: never a crash, never a restart loop under systemd.

The daemon's state is one field, `Ground.health` (a `Health`), with its reason text beside
it: the status line, `status` and the notifications all read these two
(tests/supervisor/test_reliability_*.py).

Invariant: the daemon schedules only while the ledger and lock files at their paths are the
ones it opened (tests/supervisor/test_reliability_lost.py): otherwise another process could
start a second ledger beside this one, and a slot could run twice.
Invariant: while the health is not OK nothing new is claimed; finished runs are kept in memory
and written when it is (tests/supervisor/test_reliability_full_disk.py,
test_reliability_storage.py).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path

from ipc.messages import Health
from routines.ledger import LedgerUnavailable, Unavailable
from supervisor.engine.finish import Notification
from supervisor.engine.owner import FileId, lost_file

__all__ = ["Ground", "Health", "health_of", "paused_phrase"]

log = logging.getLogger("vinos.daemon")


# The status line's words for each pause ("paused: the disk is full (…)").
_PHRASES = {
    Health.DISK_FULL: "the disk is full",
    Health.READ_ONLY: "the ledger is read-only",
    Health.IO_ERROR: "the ledger's disk fails to read or write",
    Health.LOCKED: "the ledger is locked by another process",
    Health.CORRUPT: "the ledger is damaged",
    Health.UNREACHABLE: "the fleet database is unreachable",
    Health.DRAINING: "the fleet database is back, runs made meanwhile are still going",
    Health.UNEXPECTED: "the ledger gave an unexpected database error",
    Health.FORBIDDEN: "the fleet database refuses this machine's role a right it needs",
}
_TITLES = {
    Health.DISK_FULL: "vinos-routine: the disk is full",
    Health.READ_ONLY: "vinos-routine: the ledger is read-only",
    Health.IO_ERROR: "vinos-routine: the ledger's disk fails",
    Health.LOCKED: "vinos-routine: the ledger is locked",
    Health.CORRUPT: "vinos-routine: the ledger is damaged",
    Health.UNREACHABLE: "vinos-routine: the fleet database is unreachable",
    Health.DRAINING: "vinos-routine: the fleet database is back",
    Health.UNEXPECTED: "vinos-routine: an unexpected ledger error",
    Health.FORBIDDEN: "vinos-routine: the fleet database refuses a right",
}


def health_of(reason: Unavailable) -> Health:
    """The daemon's state while its ledger is unavailable for `reason`."""
    return Health.LOST if reason is Unavailable.REPLACED else Health[reason.name]


def paused_phrase(health: Health) -> str:
    return _PHRASES.get(health, str(health))


class Ground:
    def __init__(
        self,
        held: dict[Path, FileId],
        state_dir: Path,
        notify: Callable[[Notification], None],
        retry_sec: float = 30.0,
        ledger: tuple[Path, Callable[[], FileId | None]] | None = None,
    ) -> None:
        self.held = held
        # The ledger's path and the identity of the file it opened: a ledger that could not be
        # opened at start (a full disk) is held from the moment it is.
        self.ledger = ledger
        self.state_dir = state_dir
        self.notify = notify
        self.retry_sec = retry_sec  # the daemon's longest tick: how soon a pause is retried
        self.health = Health.OK
        self.reason: str | None = None  # what is wrong and what to do, while health is not OK

    @property
    def shaken(self) -> bool:
        """Scheduling is paused or stopped: a due slot stays due, retried each tick."""
        return self.health is not Health.OK

    @property
    def lost(self) -> str | None:
        """Why scheduling stopped (a file deleted or replaced), while it is stopped."""
        return self.reason if self.health is Health.LOST else None

    @property
    def full(self) -> str | None:
        """Why the ledger takes no writes now (any pause), while it is paused."""
        return self.reason if self.health not in (Health.OK, Health.LOST) else None

    @property
    def unreachable_now(self) -> bool:
        return self.health in (Health.UNREACHABLE, Health.DRAINING)

    def check_held(self) -> bool:
        """False (and loudly, once) while the ledger or a lock is deleted or replaced; True
        again if the very file comes back (moved away and back)."""
        if self.ledger is not None and self.ledger[0] not in self.held:
            opened = self.ledger[1]()
            if opened is not None:
                self.held[self.ledger[0]] = opened
        why = lost_file(self.held)
        if why is None:
            if self.health is Health.LOST:
                log.warning("the ledger and lock files are back: scheduling resumed")
                self.health, self.reason = Health.OK, None
            return True
        if self.health is not Health.LOST:
            self.health = Health.LOST
            self.reason = (
                f"{why} while the daemon ran; it stopped scheduling, so that no slot can run "
                "twice. Move the file back if it was moved, or restart the daemon "
                "(systemctl --user restart vinos-routined): it then uses the ledger in place, "
                "or starts a new one"
            )
            log.error("%s", self.reason)
            self.notify(Notification("vinos-routine stopped scheduling", self.reason, "critical"))
        return False

    def unavailable(self, exc: LedgerUnavailable) -> None:
        """Pause for `exc.reason`, said once (a change of reason is said again)."""
        if exc.reason is Unavailable.REPLACED:
            self.check_held()  # the ledger noticed first: the same stop, said the same way
            return
        health = health_of(exc.reason)
        if self.health is Health.LOST or self.health is health:
            return  # said once; tried again every tick
        quiet = self.unreachable_now and health in (Health.UNREACHABLE, Health.DRAINING)
        self.health = health
        self.reason = self._why(health, exc)
        if quiet:  # the fleet's database came back, runs made offline still draining
            return
        log.error("%s", self.reason)
        urgency = "normal" if self.unreachable_now else "critical"
        self.notify(Notification(_TITLES[health], self.reason, urgency))

    def _why(self, health: Health, exc: LedgerUnavailable) -> str:
        retry = f"retried every {self.retry_sec:g} s, and resumed by itself once it passes"
        if health is Health.DISK_FULL:
            cause = exc.__cause__
            if cause is not None and not isinstance(cause, sqlite3.Error | OSError):
                # Not this machine's disk (a fleet's database server): its own words say where.
                return (
                    f"no space left for the ledger ({exc}): nothing new is claimed and "
                    f"finished runs are kept in memory until there is room ({retry})"
                )
            return (
                f"no space left for the ledger ({cause or exc}): nothing new is "
                "claimed and finished runs are kept in memory until there is room; free some "
                f"space on the disk holding {self.state_dir} ({retry})"
            )
        if self.unreachable_now:
            return (
                f"{exc}: no fleet routine runs until it is back (retried with back-off, resumed "
                "within a tick of its return); finished runs are kept in memory and recorded then"
            )
        return (
            f"{exc}. Nothing new is claimed and finished runs are kept in memory meanwhile; {retry}"
        )

    def recovered(self) -> None:
        """A tick went through: a pause (not LOST) has passed."""
        if self.health in (Health.OK, Health.LOST):
            return
        was, self.health, self.reason = self.health, Health.OK, None
        if was in (Health.UNREACHABLE, Health.DRAINING):
            log.warning("the fleet database is back: scheduling resumed")
        elif was is Health.DISK_FULL:
            log.warning("space is back: the ledger takes writes again, scheduling resumed")
        else:
            log.warning("the ledger is usable again (it was %s): scheduling resumed", was)
