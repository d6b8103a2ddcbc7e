"""`list`'s text: the table of every routine (schedule, next run, last result, today's
cost) and the notes under it, from the read model's rows alone (tests/cli/test_render.py).
"""

from __future__ import annotations

from datetime import datetime

from routines.safetext import one_line
from supervisor.cli.present import color, table, when

TYPE_CHECKING = False  # typing's own flag, without importing typing (routines/query/rowclass.py)
if TYPE_CHECKING:
    from collections.abc import Collection, Sequence
    from typing import Any, NamedTuple

    from routines.query import RoutineRow
else:
    from routines.query.rowclass import NamedTuple

__all__ = ["EMPTY", "HEADERS", "Listing", "cells", "json_value", "render"]

HEADERS = ("NAME", "KIND", "STATE", "SCHEDULE", "NEXT", "LAST", "TODAY")
EMPTY = "no routines yet: create one with 'vinos-routine create NAME'"


class Listing(NamedTuple):
    """What `list` prints: the table's rows, then the notes about enable/disable overrides
    and signatures (plain), then the warnings (in yellow). Not a dataclass: `list` loads no
    dataclasses (~4 ms)."""

    rows: list[list[str]]
    signed: list[str]
    notes: list[str]


def json_value(lines: Sequence[RoutineRow], stale: Collection[str] | None) -> list[dict[str, Any]]:
    """`list --json`; an invalid file says whether the daemon still runs its last good
    version (None: no daemon answered)."""
    out = []
    for line in lines:
        item = line.as_json()
        if not line.valid:
            item["last_good_running"] = None if stale is None else line.name in stale
        out.append(item)
    return out


def _notes_of(ln: RoutineRow, warnings: list[str], signed: list[str]) -> None:
    if ln.disabled_reason:
        warnings.append(one_line(f"{ln.name}: disabled: {ln.disabled_reason}"))
    if ln.file_enabled is not None and not ln.enabled and ln.disabled_reason:
        from supervisor.engine.limits import turned_off_note

        warnings.append(one_line(turned_off_note(ln.name, ln.disabled_reason)))
    elif ln.file_enabled is not None:
        cmd, says = ("enable", "false") if ln.enabled else ("disable", "true")
        signed.append(
            f"{ln.name}: {'on' if ln.enabled else 'off'} by `vinos-routine {cmd}`; its file says "
            f"enabled = {says}, which counts again once that line is edited"
        )
    if ln.not_here:
        warnings.append(one_line(f"{ln.name}: not run on this machine: {ln.not_here}"))
    if ln.permissions is not None and ln.permissions != "ask":
        from routines.spec import Permissions

        words = Permissions(ln.permissions).words
        signed.append(f"{ln.name}: unattended: {words} ({ln.permissions})")
    if ln.needs_you:
        warnings.append(f"{ln.name}: needs you: run {ln.needs_you} waits (vinos-routine pending)")
    if ln.premium_key:
        warnings.append(one_line(f"{ln.name}: {ln.premium_key}"))
    if ln.signature_note:
        (warnings if ln.signature_warning else signed).append(
            one_line(f"{ln.name}: {ln.signature_note}")
        )


def _invalid_cells(ln: RoutineRow, stale: Collection[str] | None, c: bool) -> list[str]:
    label = color("invalid", "red", c)
    if stale and ln.name in stale:
        label += " " + color("(the daemon still runs its last good version)", "yellow", c)
    # A file name is untrusted text: `\e[2J.toml` must not clear the screen, nor a newline
    # in one break the table (tests/supervisor/test_reliability_names.py::
    # test_escapes_and_newlines_in_file_names_are_shown_escaped).
    return [one_line(ln.name), "", label, "", "", "", ""]


def _routine_cells(ln: RoutineRow, now: datetime, c: bool, whens: dict[datetime, str]) -> list[str]:
    state = color("on", "green", c) if ln.enabled else color("off", "dim", c)
    if ln.running:
        state += " " + color("running", "blue", c)
    elif ln.queued:
        state += " queued"
    elif ln.needs_you:
        state += " " + color("needs you", "yellow", c)
    last = ln.last_status or "—"
    if ln.last_outcome:
        last += f" · {ln.last_outcome}"
    if ln.last_failed:
        last = color(last, "red", c)
    return [
        one_line(ln.name),
        ln.kind,
        state,
        ln.schedule,
        _when(ln.next_run, now, whens) if ln.next_run else "—",
        last,
        f"${ln.today_dollars:.2f}",
    ]


def _when(at: datetime, now: datetime, whens: dict[datetime, str]) -> str:
    """present.when, once an instant: 10,000 routines share far fewer next runs."""
    text = whens.get(at)
    if text is None:
        text = whens[at] = when(at, now)
    return text


def cells(
    lines: Sequence[RoutineRow], stale: Collection[str] | None, now: datetime, c: bool
) -> Listing:
    """The table under HEADERS and the notes, from the routines' rows; `stale`: the invalid
    files whose last good version the daemon runs; `c`: with colour."""
    from routines.safetext import one_line

    rows: list[list[str]] = []
    notes: list[str] = []
    signed: list[str] = []
    whens: dict[datetime, str] = {}
    for ln in lines:
        if not ln.valid and ln.kind == "?":
            rows.append(_invalid_cells(ln, stale, c))
            notes.extend(one_line(e) for e in ln.errors)
        else:
            rows.append(_routine_cells(ln, now, c, whens))
            _notes_of(ln, notes, signed)
    return Listing(rows, signed, notes)


def render(listing: Listing, c: bool) -> str:
    """The text of `list` for one routine or more."""
    import io

    out = io.StringIO()
    table(HEADERS, listing.rows, out)
    for note in listing.signed:
        out.write(note + "\n")
    for note in listing.notes:
        out.write(color(note, "yellow", c) + "\n")
    return out.getvalue()
