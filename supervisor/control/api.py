"""What the control commands may see and ask of the daemon: the `Controlled` protocol.

supervisor/control/handlers.py, answers.py and watch.py are typed against it, never against the
Daemon
class (which implements it, supervisor/daemon.py): they cannot reach the pool, the scheduler
or the Site behind it, and no module of theirs imports the daemon's (the import-linter's
acyclic contract holds it).
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from routines.spec import Routine
from routines.spec.paths import Paths
from routines.spec.registry import Registry
from supervisor.engine.clock import Clock

if TYPE_CHECKING:
    from ipc import RunReply, StatusReply
    from routines.ledger.api import Store
    from supervisor.engine.finish import Finished
    from supervisor.engine.reply import ReplyTo
    from supervisor.engine.scheduler import Listener, Pending

__all__ = ["Controlled", "Refused"]


class Refused(Exception):
    """A manual run the daemon will not take now: `code` for the client, and why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Controlled(Protocol):
    @property
    def paths(self) -> Paths: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def started_at(self) -> datetime: ...

    @property
    def ledger(self) -> Store:
        """The daemon's open ledger: borrowed, never closed by a command."""
        ...

    @property
    def registry(self) -> Registry:
        """The routine files as last scanned (the last good version of a bad edit)."""
        ...

    def fire(self, routine: Routine, text: str | None) -> tuple[str, str | None]:
        """A fire call's event (supervisor/engine/triggers.py): ("started", run id) or ("held",
        None); Refused when the routine takes none or the daemon is stopping."""
        ...

    def snapshot(self) -> StatusReply:
        """What `status` answers."""
        ...

    def refresh(self, rescan: bool = False) -> bool:
        """Rescan the files (now, with `rescan`) and re-read the ledger's states if changed."""
        ...

    def force_reload(self) -> None:
        """Re-read config.toml, the files and the ledger's states now."""
        ...

    def set_enabled(self, routine: Routine, on: bool) -> None:
        """`enable`/`disable`: recorded in the ledger, then in force at once."""
        ...

    def start_action(self, proposal_id: int, shown: str) -> None:
        """The dashboard's Approve: the action runner started on the input shown; a run
        paused for it resumes when it ends. OSError when it cannot start."""
        ...

    def wake(self) -> None:
        """Look at the ledger again now (a decision a paused run waits for)."""
        ...

    def lost(self) -> str | None:
        """Why scheduling stopped (the ledger or a lock file replaced), while it is stopped."""
        ...

    def refusal(self) -> Refused | None:
        """Why a manual run is refused now (the ledger lost or paused), or None."""
        ...

    def submit(
        self,
        routine: Routine,
        *,
        listener: Listener | None,
        reply: ReplyTo | None,
        debug: bool,
    ) -> tuple[Pending, asyncio.Future[RunReply]]:
        """Queue a manual run. Refused (stopping, busy, the ledger took no write): nothing
        recorded, nothing runs."""
        ...

    def active_run_of(self, name: str) -> str | None: ...

    def find(self, run_id: str) -> Pending | None:
        """The run, while it runs or waits."""
        ...

    def finished(self, run_id: str) -> Finished | None:
        """The run, recently ended."""
        ...

    def activity(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The run ids running and queued, cheaply (the status watch compares them)."""
        ...

    def known_fire(self, name: str, routine: Routine, now: datetime) -> datetime | None:
        """The scheduler's next fire of `routine`, when it is provably what a fresh
        computation from `now` would give; else None."""
        ...

    def serves_local_ledger(self) -> bool:
        """Whether the daemon's ledger is this machine's file (a fleet's is not)."""
        ...
