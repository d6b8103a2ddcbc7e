"""Turning a routine on or off: the one ledger change behind the CLI's `enable`/`disable` and
the daemon's control commands of the same names (which the dashboard uses)."""

from __future__ import annotations

from datetime import datetime

from routines.ledger.api import LedgerAPI
from routines.runs import fingerprint, slot_id
from routines.spec import Routine

__all__ = ["set_enabled"]


def set_enabled(ledger: LedgerAPI, routine: Routine, on: bool, now: datetime) -> None:
    """`Ledger.enable` (the streak cleared, nothing owed from before `now`) or `disable`."""
    if on:
        ledger.enable(
            routine.name,
            file_enabled=routine.enabled,
            cursor=slot_id(now),
            fingerprint=fingerprint(routine.schedule),
        )
    else:
        ledger.disable(routine.name, file_enabled=routine.enabled)
