"""`vinos-routine list`: every routine, its schedule, next run, last result and today's cost.

Works from the files and the ledger alone, with or without a daemon.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = ["RoutineLine", "collect", "register"]

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


@dataclass(frozen=True, slots=True)
class RoutineLine:
    name: str
    kind: str
    origin: str
    enabled: bool
    valid: bool
    schedule: str  # the description, or the raw expression
    expression: str
    next_run: datetime | None
    last_status: str | None
    last_outcome: str | None
    last_finished: str | None
    today_dollars: float
    disabled_reason: str | None
    errors: tuple[str, ...]
    warnings: tuple[str, ...]
    running: bool = False
    queued: bool = False
    max_dollars_per_day: float | None = None  # the daily budget, None when unlimited
    open_on_login: bool = False  # its outputs wait to be seen (`brief --unseen`)
    signature: str = "unsigned"  # routines.signing.SignatureState
    signature_note: str | None = None  # "signed by …", "signature invalid: …"
    signature_warning: bool = False  # the note is a problem (invalid, or auto_approve unsigned)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "origin": self.origin,
            "enabled": self.enabled,
            "valid": self.valid,
            "schedule": self.schedule,
            "expression": self.expression,
            "next_run": self.next_run.isoformat() if self.next_run else None,
            "last_status": self.last_status,
            "last_outcome": self.last_outcome,
            "last_finished": self.last_finished,
            "today_dollars": round(self.today_dollars, 6),
            "disabled_reason": self.disabled_reason,
            "errors": list(self.errors),
            "warnings": list(self.warnings),
            "running": self.running,
            "queued": self.queued,
            "max_dollars_per_day": self.max_dollars_per_day,
            "open_on_login": self.open_on_login,
            "signature": self.signature,
            "signature_note": self.signature_note,
        }


def collect(now: datetime | None = None) -> list[RoutineLine]:
    """One line per routine file, from the registry and the ledger (no daemon needed)."""
    from zoneinfo import ZoneInfo

    from routines.ledger import Ledger, is_enabled
    from routines.paths import paths
    from routines.registry import scan
    from routines.runs import RunStatus
    from routines.schedule import summary

    now = now or datetime.now(UTC)
    p = paths()
    registry = scan(p)
    with Ledger(p.ledger) as ledger:
        states = ledger.states()
        last = ledger.last_runs()
        active = {(a.routine, a.status) for a in ledger.active_runs()}
        lines: list[RoutineLine] = []
        for name, entry in sorted(registry.entries.items()):
            r = entry.routine
            state = states.get(name)
            errors = tuple(str(e) for e in entry.errors)
            if r is None:
                lines.append(
                    RoutineLine(
                        name=name,
                        kind="?",
                        origin=entry.origin.value,
                        enabled=False,
                        valid=False,
                        schedule="",
                        expression="",
                        next_run=None,
                        last_status=None,
                        last_outcome=None,
                        last_finished=None,
                        today_dollars=0.0,
                        disabled_reason=None,
                        errors=errors,
                        warnings=(),
                    )
                )
                continue
            enabled = is_enabled(states, name, r.enabled)
            description, next_run = summary(r.schedule, r.kind, name, enabled, now)
            lr = last.get(name)
            lines.append(
                RoutineLine(
                    name=name,
                    kind=r.kind.value,
                    origin=entry.origin.value,
                    enabled=enabled,
                    valid=entry.valid,
                    schedule=description,
                    expression=r.schedule.expression,
                    next_run=next_run,
                    last_status=lr.status if lr else None,
                    last_outcome=lr.outcome if lr else None,
                    last_finished=lr.finished_at if lr else None,
                    today_dollars=ledger.spent_today(name, ZoneInfo(r.schedule.timezone), now),
                    disabled_reason=state.disabled_reason if state and not enabled else None,
                    errors=errors,
                    warnings=entry.warnings,
                    running=(name, RunStatus.RUNNING) in active,
                    queued=(name, RunStatus.QUEUED) in active,
                    max_dollars_per_day=r.budget.max_dollars_per_day,
                    open_on_login=r.output.open_on_login,
                    **_signature(entry.path, r, p.allowed_signers),
                )
            )
    return lines


def _signature(path: Any, routine: Any, allowed_signers: Any) -> dict[str, Any]:
    """The signature fields of a routine's line. ssh-keygen runs only for a file that has a
    .sig: an unsigned routine costs `list` one lstat."""
    import os

    from routines.signing import (
        auto_approve_requested,
        signature_note,
        signature_path,
        verify_routine,
    )

    auto = "auto_approve" in routine.text and auto_approve_requested(routine)
    if not auto and not os.path.lexists(signature_path(path)):
        return {}
    check = verify_routine(path, allowed_signers, data=routine.text.encode())
    note = signature_note(check, auto, routine.name)
    return {
        "signature": check.state.value,
        "signature_note": note[0] if note else None,
        "signature_warning": bool(note and note[1]),
    }


def _notes_of(ln: RoutineLine, warnings: list[str], signed: list[str]) -> None:
    from routines.safetext import one_line

    if ln.disabled_reason:
        warnings.append(one_line(f"{ln.name}: disabled: {ln.disabled_reason}"))
    if ln.signature_note:
        (warnings if ln.signature_warning else signed).append(
            one_line(f"{ln.name}: {ln.signature_note}")
        )


def in_force_despite_errors() -> set[str] | None:
    """Routines whose file is invalid but whose last good version the daemon still runs;
    None when no daemon answers (then nothing is running them)."""
    from supervisor.client import DaemonError
    from supervisor.commands.common import try_daemon

    client = try_daemon()
    if client is None:
        return None
    with client:
        try:
            return set(client.request("status").get("stale", []))
        except (DaemonError, OSError):
            return None


def run(args: argparse.Namespace) -> int:
    from routines.runs import counts_as_strike
    from routines.safetext import one_line
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
            # A file name is untrusted text: `\e[2J.toml` must not clear the screen, nor a
            # newline in one break the table (issue 17, item 8).
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
