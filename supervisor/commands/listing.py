"""`vinos-routine list`: every routine, its schedule, next run, last result and today's cost.

Works from the files and the ledger alone, with or without a daemon.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from supervisor.overview import RoutineRow

__all__ = ["register"]

EXAMPLE = """example:
  vinos-routine list
  vinos-routine list --json | jq '.[] | select(.enabled)'
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "list",
        help="all routines with schedule, next run, last status and today's cost",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def _notes_of(ln: RoutineRow, warnings: list[str], signed: list[str]) -> None:
    from routines.safetext import one_line

    if ln.disabled_reason:
        warnings.append(one_line(f"{ln.name}: disabled: {ln.disabled_reason}"))
    if ln.file_enabled is not None:
        cmd, says = ("enable", "false") if ln.enabled else ("disable", "true")
        signed.append(
            f"{ln.name}: {'on' if ln.enabled else 'off'} by `vinos-routine {cmd}`; its file says "
            f"enabled = {says}, which counts again once that line is edited"
        )
    if ln.not_here:
        warnings.append(one_line(f"{ln.name}: not run on this machine: {ln.not_here}"))
    if ln.signature_note:
        (warnings if ln.signature_warning else signed).append(
            one_line(f"{ln.name}: {ln.signature_note}")
        )


def run(args: argparse.Namespace) -> int:
    from routines.runs import counts_as_strike
    from routines.safetext import one_line
    from supervisor.overview import collect, in_force_despite_errors
    from supervisor.present import color, print_json, table, use_color, when

    lines = collect()
    # Only the daemon knows a last good version of a file that is now invalid: ask it, and
    # only when there is such a file (a plain `list` stays one process, no socket).
    stale = in_force_despite_errors() if any(not ln.valid for ln in lines) else set()
    if args.json:
        out = []
        for line in lines:
            item = line.as_json()
            if not line.valid:
                item["last_good_running"] = None if stale is None else line.name in stale
            out.append(item)
        print_json(out)
        return 0
    if not lines:
        print("no routines yet: create one with 'vinos-routine create NAME'")
        return 0
    c = use_color()
    now = datetime.now(UTC)
    rows = []
    notes: list[str] = []
    signed: list[str] = []
    for ln in lines:
        if not ln.valid and ln.kind == "?":
            label = color("invalid", "red", c)
            if stale and ln.name in stale:
                label += " " + color("(the daemon still runs its last good version)", "yellow", c)
            # A file name is untrusted text: `\e[2J.toml` must not clear the screen, nor a newline
            # in one break the table (tests/supervisor/test_reliability_names.py::
            # test_escapes_and_newlines_in_file_names_are_shown_escaped).
            rows.append([one_line(ln.name), "", label, "", "", "", ""])
            notes.extend(one_line(e) for e in ln.errors)
            continue
        state = color("on", "green", c) if ln.enabled else color("off", "dim", c)
        if ln.running:
            state += " " + color("running", "blue", c)
        elif ln.queued:
            state += " queued"
        last = ln.last_status or "—"
        if ln.last_outcome:
            last += f" · {ln.last_outcome}"
        if counts_as_strike(ln.last_status):
            last = color(last, "red", c)
        rows.append(
            [
                one_line(ln.name),
                ln.kind,
                state,
                ln.schedule,
                when(ln.next_run, now) if ln.next_run else "—",
                last,
                f"${ln.today_dollars:.2f}",
            ]
        )
        _notes_of(ln, notes, signed)
    table(["NAME", "KIND", "STATE", "SCHEDULE", "NEXT", "LAST", "TODAY"], rows)
    for note in signed:
        print(note)
    for note in notes:
        print(color(note, "yellow", c))
    return 0
