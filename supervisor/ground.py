"""What the daemon does when its ground moves (tests/supervisor/test_reliability_*.py): its ledger
or a lock file deleted or replaced, or no space left for the ledger. Each is said once, loudly (the
log and a desktop notification), held while it lasts, and undone when it passes.

Invariant: the daemon schedules only while the ledger and lock files at their paths are the
ones it opened (tests/supervisor/test_reliability_lost.py): otherwise another process could
start a second ledger beside this one, and a slot could run twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from routines.ledger import LedgerFull
from supervisor.owner import FileId, lost_file
from supervisor.record import Notification

__all__ = ["Ground"]

log = logging.getLogger("vinos.daemon")


class Ground:
    def __init__(
        self, held: dict[Path, FileId], state_dir: Path, notify: Callable[[Notification], None]
    ) -> None:
        self.held = held
        self.state_dir = state_dir
        self.notify = notify
        self.lost: str | None = None  # why scheduling stopped, while it is stopped
        self.full: str | None = None  # why the ledger takes no writes now (a full disk)
        self.unreachable_now = False  # `full` is the fleet's database out of reach

    @property
    def shaken(self) -> bool:
        """Scheduling is paused (lost or full): a due slot stays due, retried each tick."""
        return self.lost is not None or self.full is not None

    def check_held(self) -> bool:
        """False (and loudly, once) while the ledger or a lock is deleted or replaced; True
        again if the very file comes back (moved away and back)."""
        why = lost_file(self.held)
        if why is None:
            if self.lost is not None:
                log.warning("the ledger and lock files are back: scheduling resumed")
                self.lost = None
            return True
        if self.lost is None:
            self.lost = (
                f"{why} while the daemon ran; it stopped scheduling, so that no slot can run "
                "twice. Move the file back if it was moved, or restart the daemon "
                "(systemctl --user restart vinos-routined): it then uses the ledger in place, "
                "or starts a new one"
            )
            log.error("%s", self.lost)
            self.notify(Notification("vinos-routine stopped scheduling", self.lost, "critical"))
        return False

    def disk_full(self, exc: LedgerFull) -> None:
        if self.full is not None:
            return  # said once; tried again every tick
        self.full = (
            f"no space left for the ledger ({exc.__cause__ or exc}): nothing new is claimed "
            "and finished runs are kept in memory until there is room; free some space on "
            f"the disk holding {self.state_dir}"
        )
        log.error("%s", self.full)
        self.notify(Notification("vinos-routine: the disk is full", self.full, "critical"))

    def unreachable(self, why: str) -> None:
        """The fleet's PostgreSQL is out of reach: the same pause as a full disk (fail closed:
        a claim the other machines cannot see could run a slot twice), said once."""
        if self.full is not None:
            return
        self.unreachable_now = True
        self.full = (
            f"{why}: no fleet routine runs until it is back (retried with back-off, resumed "
            "within a tick of its return); finished runs are kept in memory and recorded then"
        )
        log.error("%s", self.full)
        self.notify(Notification("vinos-routine: the fleet database is unreachable", self.full))

    def space_back(self) -> None:
        if self.full is not None:
            self.full = None
            if self.unreachable_now:
                self.unreachable_now = False
                log.warning("the fleet database is back: scheduling resumed")
                return
            log.warning("space is back: the ledger takes writes again, scheduling resumed")
