"""Turning a routine on or off: the one ledger change behind the CLI's `enable`/`disable` and
the daemon's control commands of the same names (which the dashboard uses)."""

from __future__ import annotations

from datetime import datetime

from routines.ledgerapi import LedgerAPI
from routines.spec import Routine
from supervisor.plan import cursor_for
from supervisor.scheduler import fingerprint

__all__ = ["set_enabled"]


def set_enabled(ledger: LedgerAPI, routine: Routine, on: bool, now: datetime) -> None:
    """Store the override with the file's `enabled` at this moment (see RoutineState.enabled).

    Enabling clears the failure streak and owes nothing from before: the cursor moves to now
    (never backwards), so the first run is the next slot.
    """
    if not on:
        ledger.update_state(
            routine.name,
            enabled_override=False,
            file_enabled_seen=routine.enabled,
            disabled_reason=None,
        )
        return
    state = ledger.state(routine.name)
    cursor = cursor_for(now)
    if state.cursor and state.cursor > cursor:
        cursor = state.cursor
    ledger.update_state(
        routine.name,
        enabled_override=True,
        file_enabled_seen=routine.enabled,
        failure_streak=0,
        disabled_reason=None,
        cursor=cursor,
        schedule_fingerprint=fingerprint(routine),
    )
