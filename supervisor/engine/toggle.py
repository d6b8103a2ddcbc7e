"""Turning a routine on or off: the one ledger change behind the CLI's `enable`/`disable` and
the daemon's control commands of the same names (which the dashboard uses), and which edits
carry an override along (`file_edits`).

Whether a routine is on has one owner: its file says it, and an override is bound to the file
it was made for (Routine.identity, RoutineState.enabled). An edit of the same file by its
person keeps the state: the daemon sees the file change at its path between two scans and
moves the binding (`file_edits`, `Ledger.rebind_override`), as `edit` does. A file removed
and another appearing, a draft, or a user file shadowing a system one is another file and
starts from what it says."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from routines.ledger import RoutineState
from routines.ledger.api import LedgerAPI
from routines.runs import fingerprint, slot_id
from routines.spec import Routine
from routines.spec.registry import Registry

__all__ = ["file_edits", "set_enabled", "unbound"]


def set_enabled(ledger: LedgerAPI, routine: Routine, on: bool, now: datetime) -> None:
    """`Ledger.enable` (the streak cleared, nothing owed from before `now`) or `disable`."""
    if on:
        ledger.enable(
            routine.name,
            file_enabled=routine.enabled,
            file_identity=routine.identity,
            cursor=slot_id(now),
            fingerprint=fingerprint(routine.schedule),
        )
    else:
        ledger.disable(routine.name, file_enabled=routine.enabled, file_identity=routine.identity)


def file_edits(before: Registry, after: Registry) -> list[tuple[str, str, str]]:
    """(name, identity before, identity after) of each routine whose file changed at the same
    path between two scans: an edit in place (an editor's rename included), which keeps an
    override bound to it. A file gone in between, or now at another path (a user file over a
    system one), is not an edit. The version in force is compared, so a save with an error
    in between still carries the state to the next good one."""
    out = []
    for name, entry in after.entries.items():
        old = before.entries.get(name)
        if old is None or old.routine is None or entry.routine is None:
            continue
        if old.path != entry.path or old.origin is not entry.origin:
            continue
        was, now = old.routine.identity, entry.routine.identity
        if was != now:
            out.append((name, was, now))
    return out


def unbound(registry: Registry, states: Mapping[str, RoutineState]) -> list[tuple[str, str]]:
    """(name, identity of the file in force) of each override bound to no file: a row from
    before the binding existed, bound once to the file the daemon finds (the one it was made
    for, as far as anything can tell now)."""
    out = []
    for routine in registry.routines():
        state = states.get(routine.name)
        if state is not None and state.overridden and state.file_identity is None:
            out.append((routine.name, routine.identity))
    return out
