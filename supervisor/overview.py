"""What `list`, `status` and the bar show about routines, from the files and the ledger.

Shared by several commands (a command module holds only its parser and its printing):
one `RoutineRow` per routine file (`collect`), the status when no daemon answers
(`offline_status`), and which invalid files still run in their last good version.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = ["RoutineRow", "collect", "in_force_despite_errors", "offline_status"]


@dataclass(frozen=True, slots=True)
class RoutineRow:
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
    not_here: str | None = None  # on a fleet: why this machine does not run it
    # The file's own `enabled` when `enable`/`disable` overrode it (None: they agree). The
    # command wins until that line is edited (tests/cli/test_cli_list.py::
    # test_list_says_when_enable_overrides_the_files_enabled).
    file_enabled: bool | None = None
    permissions: str | None = None  # [routine].permissions of an agent routine
    needs_you: str | None = None  # the run of it that waits for a person, if one does
    # `auto` that can escalate and has no premium key (supervisor.hostcheck.premium_key_missing)
    premium_key: str | None = None

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
            "not_here": self.not_here,
            "file_enabled": self.file_enabled,
            "permissions": self.permissions,
            "needs_you": self.needs_you,
            "premium_key": self.premium_key,
        }


def collect(now: datetime | None = None) -> list[RoutineRow]:
    """One line per routine file, from the registry and the ledger (no daemon needed)."""
    from contextlib import closing
    from zoneinfo import ZoneInfo

    from routines.ledger import is_enabled
    from routines.runs import RunStatus
    from routines.schedule import summary
    from routines.spec.paths import paths
    from supervisor.fleet.view import cli_ledger, held_here
    from supervisor.source import known_fire, scan

    now = now or datetime.now(UTC)
    p = paths()
    registry = scan(p)
    allowed_signers = p.allowed_signers
    signed = _signature_files(e.path for e in registry.entries.values())
    with closing(cli_ledger(p)) as ledger:
        not_here = held_here(ledger, registry)  # on a fleet: pinned elsewhere, or divergent
        states = ledger.states()
        last = ledger.last_runs()
        active = {(a.routine, a.status) for a in ledger.active_runs()}
        paused = _paused(ledger)
        # Today's spending of every routine in one query per zone, not one per routine.
        spent = ledger.spent_today_many(
            {
                name: ZoneInfo(e.routine.schedule.timezone)
                for name, e in registry.entries.items()
                if e.routine is not None
            },
            now,
        )
        keys = _premium_keys(p, registry, states)
        lines: list[RoutineRow] = []
        for name, entry in sorted(registry.entries.items()):
            r = entry.routine
            state = states.get(name)
            problems = entry.errors  # a property that builds its tuple: once a line, not thrice
            errors = tuple(str(e) for e in problems)
            valid = r is not None and not problems  # Entry.valid, Entry.warnings
            if r is None:
                lines.append(
                    RoutineRow(
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
            enabled = is_enabled(states, r)
            known = known_fire(name, r, now) if enabled else None  # the daemon's, if it serves
            description, next_run = summary(r.schedule, r.kind, name, enabled and not known, now)
            next_run = known or next_run
            lr = last.get(name)
            lines.append(
                RoutineRow(
                    name=name,
                    kind=r.kind.value,
                    origin=entry.origin.value,
                    enabled=enabled,
                    valid=valid,
                    schedule=description,
                    expression=r.schedule.expression,
                    next_run=next_run,
                    last_status=lr.status if lr else None,
                    last_outcome=lr.outcome if lr else None,
                    last_finished=lr.finished_at if lr else None,
                    today_dollars=spent[name],
                    disabled_reason=state.disabled_reason if state and not enabled else None,
                    errors=errors,
                    warnings=r.warnings if valid else (),
                    running=(name, RunStatus.RUNNING) in active,
                    queued=(name, RunStatus.QUEUED) in active,
                    max_dollars_per_day=r.budget.max_dollars_per_day,
                    open_on_login=r.output.open_on_login,
                    not_here=not_here.get(name),
                    file_enabled=r.enabled if r.enabled != enabled else None,
                    permissions=_permissions(r),
                    needs_you=paused.get(name),
                    premium_key=keys.get(name),
                    **_signature(entry.path, r, allowed_signers, signed),
                )
            )
    return lines


def _paused(ledger: Any) -> dict[str, str]:
    """Routines with a run that waits for a person → that run."""
    return {a.routine: a.run_id for a in ledger.paused_runs()}


def _permissions(routine: Any) -> str | None:
    """[routine].permissions of an agent routine (a command routine has no model to ask)."""
    return str(routine.permissions.value) if routine.agent is not None else None


def _premium_keys(p: Any, registry: Any, states: Any) -> dict[str, str]:
    """What each enabled `auto` routine that can escalate lacks for its premium leg's key
    (the starters, off until enabled, say nothing). The key lookups are the same for every
    routine: made once (Anthropic's), and config.toml read only when a routine escalates to a
    provider it declares."""
    from routines.ledger import is_enabled
    from routines.spec import Route

    autos = [
        e.routine
        for e in registry.entries.values()
        if e.routine is not None
        and is_enabled(states, e.routine)
        and e.routine.agent is not None
        and e.routine.agent.route is Route.AUTO
        and e.routine.agent.escalation.possible
    ]
    if not autos:
        return {}
    from supervisor.hostcheck import premium_key_missing

    providers = None
    if any(r.agent.premium_provider != "anthropic" for r in autos):
        from routines.spec.checks import RoutineInvalid
        from routines.spec.config import load_config

        try:
            providers = load_config(p.config_file).providers
        except RoutineInvalid:
            providers = None
    out: dict[str, str] = {}
    anthropic_found = False
    for r in autos:
        on_anthropic = r.agent.premium_provider == "anthropic"
        if on_anthropic and anthropic_found:
            continue
        missing = premium_key_missing(p, r, providers)
        anthropic_found = anthropic_found or (on_anthropic and missing is None)
        if missing:
            out[r.name] = missing
    return out


def _signature_files(paths: Any) -> set[str]:
    """Every routines.spec.paths.signature_path (NAME.toml.sig) beside the routine files, as
    `os.path.lexists` sees them (a dangling link too), from one listing of each directory:
    not an lstat a line (with 10,000 routines, most of `list`'s system time)."""
    import os

    out: set[str] = set()
    for d in {os.path.dirname(os.fspath(p)) for p in paths}:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        out.update(os.path.join(d, n) for n in names if n.endswith(".toml.sig"))
    return out


def _signature(path: Any, routine: Any, allowed_signers: Any, sigs: set[str]) -> dict[str, Any]:
    """The signature fields of a routine's line. ssh-keygen runs only for a file that has a
    .sig (`sigs`, from _signature_files)."""
    import os

    signed = os.fspath(path) + ".sig" in sigs
    if not signed and "auto_approve" not in routine.text:
        return {}  # the common case, without importing routines.signing (~3 ms)
    from routines.signing import auto_approve_requested, signature_note, verify_routine

    auto = auto_approve_requested(routine)  # permissions = "everything", or auto_approve
    if not auto and not signed:
        return {}
    check = verify_routine(path, allowed_signers, data=routine.text.encode())
    note = signature_note(check, auto, routine.name)
    return {
        "signature": check.state.value,
        "signature_note": note[0] if note else None,
        "signature_warning": bool(note and note[1]),
    }


def in_force_despite_errors() -> set[str] | None:
    """Routines whose file is invalid but whose last good version the daemon still runs;
    None when no daemon answers (then nothing is running them)."""
    from supervisor.client import DaemonError, try_daemon

    client = try_daemon()
    if client is None:
        return None
    with client:
        try:
            return set(client.request("status").get("stale", []))
        except (DaemonError, OSError):
            return None


def offline_status(rows: list[RoutineRow]) -> dict[str, Any]:
    """`status` from the files and the ledger alone, for when no daemon answers: the shape
    of the daemon's reply (ipc.StatusReply)."""
    from ipc import ActiveEntry, NextFire, StatusReply, reply_json

    nxt = sorted((r.next_run, r.name) for r in rows if r.next_run is not None)
    reply = StatusReply(
        daemon=False,
        running=[ActiveEntry(r.name) for r in rows if r.running],
        queued=[ActiveEntry(r.name) for r in rows if r.queued],
        next=[NextFire(n, at.isoformat()) for at, n in nxt[:20]],
        routines=len(rows),
        enabled=sum(1 for r in rows if r.enabled),
        invalid=[r.name for r in rows if r.errors],
    )
    return reply_json(reply)
