"""The ledger's data as every store and caller sees it: run rows, routine states, each
routine's last run, and the errors (a `LedgerError`, or a `LedgerUnavailable` with its
`Unavailable` reason). Typed by the run vocabulary (routines/runs.py); no SQL here.

    LedgerError                 the ledger cannot be used; the message names it and what to do
     └─ LedgerUnavailable       nothing of the call was recorded, and it may pass by itself:
                                `reason` (an `Unavailable`) says why; the daemon pauses and
                                retries, a run that did not execute because of it is never
                                `failed` and never a strike
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from routines.ledger.shared import Row
from routines.runs import Outcome, RunStatus, Trigger, status_of

__all__ = [
    "ANY",
    "CLAIM_RETENTION",
    "RUN_COLUMNS",
    "ActiveRun",
    "FileSeen",
    "LastRun",
    "LedgerError",
    "LedgerUnavailable",
    "MachineInUse",
    "RoutineState",
    "RunRow",
    "Unavailable",
    "day_bounds",
    "is_enabled",
    "last_run_row",
    "run_row",
    "state_row",
    "stored_run",
    "today_bounds",
    "walk_thread",
]

# Claims older than this are forgotten (`prune_claims`); the cursor keeps their slots away.
CLAIM_RETENTION = timedelta(days=45)


class Unavailable(StrEnum):
    """Why a ledger takes no reads or writes now; each passes without losing the history."""

    DISK_FULL = "disk full"  # no space for the ledger (SQLITE_FULL, ENOSPC, PostgreSQL DiskFull)
    READ_ONLY = "read-only"  # the file, its -wal or -shm, or the filesystem is not writable
    IO_ERROR = "I/O error"  # the filesystem failed a read or write (a failing disk, a lost mount)
    LOCKED = "locked"  # another process held it past the busy timeout
    CORRUPT = "corrupt"  # PRAGMA quick_check found damage: only then is moving it aside advised
    UNREACHABLE = "unreachable"  # a fleet's PostgreSQL refused, dropped or never answered
    DRAINING = "draining"  # the fleet's database is back; runs made offline are still going
    FORBIDDEN = "permission denied"  # the fleet database's role lacks a right (SQLSTATE 42501)
    REPLACED = "replaced"  # the file at the ledger's path is not the one opened: never touched
    # SQLite failed in a way none of the above names: said in its own words, with no advice
    # (the disk, a chmod, moving it aside) that nothing showed to be the cause
    UNEXPECTED = "database error"


class LedgerError(RuntimeError):
    """The ledger cannot be used; the message names the file and what to do."""


class LedgerUnavailable(LedgerError):
    """Nothing of the call was recorded, and the cause may pass: the caller keeps what it
    could not write (or does not act on it) and tries again later."""

    def __init__(self, reason: Unavailable, message: str) -> None:
        super().__init__(message)
        self.reason = reason

    def __reduce__(self) -> tuple[type[LedgerUnavailable], tuple[Unavailable, str]]:
        return type(self), (self.reason, str(self))


class MachineInUse(LedgerError):
    """A fleet's machine name is held by another live daemon (routines/ledger/fleet.py
    `register`): this one must not run under it (its renewals would keep the other's runs
    alive, and two daemons would claim as one machine). Here, not beside psycopg: the
    daemon catches it whether or not it is on a fleet (api.py exports it too)."""


RUN_COLUMNS = (
    "run_id",
    "routine",
    "slot",
    "trigger",
    "status",
    "outcome",
    "detail",
    "started_at",
    "finished_at",
    "duration_sec",
    "route",
    "model",
    "escalated",
    "escalated_reason",
    "input_tokens",
    "output_tokens",
    "local_input_tokens",
    "local_output_tokens",
    "tool_calls",
    "tools_used",
    "dollars",
    "output_file",
    "owner_pid",
    "owner_started",
    "worker_pid",
    "parent_run_id",
    "tried_model",
)


class _Any:
    """The type of ANY: "whatever the cursor is" for `Ledger.claim(expect_cursor=...)`."""


ANY = _Any()


@dataclass(frozen=True, slots=True)
class RunRow:
    """A run as `history` shows it. Older rows may lack the newer fields (None)."""

    id: int
    routine: str
    run_id: str | None
    slot: str | None
    trigger: Trigger | None
    status: RunStatus | str | None  # str: a v2.0.x exit_status the enum lacks ("error")
    outcome: Outcome | None
    detail: str | None
    started_at: str | None
    finished_at: str | None
    duration_sec: float | None
    route: str | None
    model: str | None
    escalated: int | None
    escalated_reason: str | None
    input_tokens: int | None
    output_tokens: int | None
    local_input_tokens: int | None
    local_output_tokens: int | None
    tool_calls: int | None
    tools_used: list[str] | None
    dollars: float | None
    output_file: str | None
    parent_run_id: str | None = None  # trigger "reply": the run it continues
    tried_model: str | None = None  # an escalation's model never reached (the local answer kept)

    def as_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True, slots=True)
class ActiveRun:
    """A run row still `queued` or `running`, with who owns it."""

    run_id: str
    routine: str
    slot: str | None
    status: RunStatus  # one of ACTIVE
    owner_pid: int | None
    owner_started: float | None
    worker_pid: int | None


@dataclass(frozen=True, slots=True)
class RoutineState:
    routine: str
    enabled_override: bool | None = None
    file_enabled_seen: bool | None = None
    failure_streak: int = 0
    disabled_reason: str | None = None
    cursor: str | None = None  # the latest slot id handled (claimed, skipped or missed)
    schedule_fingerprint: str | None = None
    # The file the override was made for (Routine.identity); None in a row from before
    # schema 10, which the daemon binds to the file in force (supervisor/engine/toggle.py unbound).
    file_identity: str | None = None

    def enabled(self, file_enabled: bool, file_identity: str) -> bool:
        """Whether the routine is on: the latest of `enable`/`disable` and the file's value.

        `enable`/`disable` (and auto-disable) store an override together with the file's
        `enabled` at that moment and the file's identity; editing the file's `enabled`
        afterwards is the newer action, so the override applies only while the file still
        says what it said then. Invariant: an override never applies to a file other than
        the one it was made for, so a routine removed and another file appearing under its
        name (a draft, a copy) starts from what that file says; the daemon carries the
        binding across the person's edits (`rebind_override`).
        tests/cli/test_cli_mcp_server.py::test_a_leftover_override_never_enables_another_file
        """
        if self.enabled_override is None or self.file_enabled_seen != file_enabled:
            return file_enabled
        if self.file_identity is not None and self.file_identity != file_identity:
            return file_enabled
        return self.enabled_override

    @property
    def overridden(self) -> bool:
        """Whether a person (or three strikes) turned this name on or off by hand."""
        return self.enabled_override is not None


class FileSeen(Protocol):
    """What is_enabled reads of a routine: its name, what its file says, and which file."""

    @property
    def name(self) -> str: ...
    @property
    def enabled(self) -> bool: ...
    @property
    def identity(self) -> str: ...


def is_enabled(states: Mapping[str, RoutineState], routine: FileSeen) -> bool:
    """Whether `routine` is on, from the states read in one query (`Ledger.states`)."""
    state = states.get(routine.name)
    if state is None or state.enabled_override is None:
        # No override: RoutineState.enabled would say the file's, without the file's identity
        # (a hash of its bytes), which `list` would compute for each of 10,000 routines.
        return routine.enabled
    return state.enabled(routine.enabled, routine.identity)


def state_row(r: Row) -> RoutineState:
    """A routine_state row (either backend's) as a `RoutineState`: 0/1 as booleans."""

    def b(v: object) -> bool | None:
        return None if v is None else bool(v)

    return RoutineState(
        routine=r["routine"],
        enabled_override=b(r["enabled_override"]),
        file_enabled_seen=b(r["file_enabled_seen"]),
        failure_streak=r["failure_streak"],
        disabled_reason=r["disabled_reason"],
        cursor=r["cursor"],
        schedule_fingerprint=r["schedule_fingerprint"],
        file_identity=r["file_identity"],
    )


def last_run_row(r: Row) -> LastRun:
    """routine_state's last-run columns (either backend's) as a `LastRun`."""
    return LastRun(
        r["routine"],
        r["last_run_id"],
        status_of(r["last_status"]),
        Outcome(r["last_outcome"]) if r["last_outcome"] else None,
        r["last_started"],
        r["last_finished"],
    )


def run_row(data: dict[str, Any]) -> RunRow:
    """A run's columns (exactly `RunRow`'s fields, either backend's) as a `RunRow`:
    tools_used from its JSON, the texts as their enums."""
    tools = data.get("tools_used")
    data["tools_used"] = json.loads(tools) if tools else ([] if tools == "" else None)
    data["status"] = status_of(data["status"]) if data["status"] is not None else None
    data["trigger"] = Trigger(data["trigger"]) if data["trigger"] else None
    data["outcome"] = Outcome(data["outcome"]) if data["outcome"] else None
    return RunRow(**data)


def stored_run(row: RunRow) -> dict[str, object]:
    """`run_row` backwards: a RunRow's columns as a run row stores them (tools_used as JSON,
    enums as their text), without its row id: what `fleet join` copies into the fleet's runs
    (sqlstore.py `insert_run_row`). Every field, so a column added to RunRow is copied too
    (tests/fleet/test_fleet_cli.py joins a history)."""
    values: dict[str, object] = {}
    for name in RunRow.__dataclass_fields__:
        value = getattr(row, name)
        if name == "tools_used" and value is not None:
            value = json.dumps(list(value))
        values[name] = value.value if isinstance(value, StrEnum) else value
    del values["id"]
    return values


@dataclass(frozen=True, slots=True)
class LastRun:
    """A routine's newest finished run, as routine_state keeps it."""

    routine: str
    run_id: str | None
    status: RunStatus | str | None  # str: a v2.0.x exit_status the enum lacks ("error")
    outcome: Outcome | None
    started_at: str | None
    finished_at: str | None


def walk_thread(
    run_id: str,
    run: Callable[[str], RunRow | None],
    replies_to: Callable[[Sequence[str]], list[RunRow]],
) -> list[RunRow]:
    """The conversation `run_id` belongs to: its first run, then every reply below it
    (depth first, oldest first); [] when the run is unknown. Each store's `thread`, walked
    over its own `run` and `replies_to`."""
    row = run(run_id)
    seen: set[str] = set()
    while row is not None and row.parent_run_id and row.run_id not in seen:
        seen.add(row.run_id or "")
        parent = run(row.parent_run_id)
        if parent is None:
            break
        row = parent
    if row is None:
        return []
    out: list[RunRow] = []

    def below(r: RunRow) -> None:
        out.append(r)
        if r.run_id and len(out) < 1000:  # a cycle cannot be made, but never loop
            for child in replies_to([r.run_id]):
                if child.run_id not in {o.run_id for o in out}:
                    below(child)

    below(row)
    return out


def today_bounds(
    zones: Mapping[str, ZoneInfo], now: datetime
) -> dict[tuple[datetime, datetime], list[str]]:
    """The routines of `zones` grouped by where today starts and ends in each one's zone
    (`spent_today_many`): routines in one zone share one range, so a store reads each
    range once, however many routines it covers."""
    groups: dict[tuple[datetime, datetime], list[str]] = {}
    by_zone: dict[ZoneInfo, tuple[datetime, datetime]] = {}  # 10,000 routines, a few zones
    for name, zone in zones.items():
        bounds = by_zone.get(zone)
        if bounds is None:
            bounds = by_zone[zone] = day_bounds(now.astimezone(zone).date(), zone)
        groups.setdefault(bounds, []).append(name)
    return groups


def day_bounds(day: date, zone: ZoneInfo) -> tuple[datetime, datetime]:
    """The UTC instants where a calendar day in `zone` starts and ends (DST-aware)."""
    start = datetime(day.year, day.month, day.day, tzinfo=zone)
    nxt = day + timedelta(days=1)
    end = datetime(nxt.year, nxt.month, nxt.day, tzinfo=zone)
    return start.astimezone(UTC), end.astimezone(UTC)
