"""The ledger's backend seam: what the supervisor, the CLI and the dashboard use of a ledger.

One SQL implementation, routines/ledger/sqlstore.py's `SqlLedger`, on two connections:
routines/ledger/sqlite.py's `Ledger` (SQLite, one machine, the default) and
routines/ledger/postgres.py's `PgLedger` (PostgreSQL, a fleet of machines; imported only when
config.toml has `[fleet]`); and routines/ledger/memory.py's `MemoryLedger`, the reference
store. tests/fleet/test_ledger_contract.py runs one suite on the three.
`open_ledger` picks the backend from the config.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from zoneinfo import ZoneInfo

from routines.ledger import (
    ANY,
    ActiveRun,
    DaySummary,
    LastRun,
    Ledger,
    RoutineState,
    RunRow,
)
from routines.ledger.model import MachineInUse
from routines.runs import Ended, RunEnd, RunStatus, Strike, Trigger

if TYPE_CHECKING:
    from pathlib import Path

    from routines.ledger.memory import MemoryLedger
    from routines.ledger.model import _Any
    from routines.ledger.postgres import PgLedger

__all__ = [
    "FleetAddress",
    "LedgerAPI",
    "MachineInUse",
    "Maintenance",
    "Requests",
    "Store",
    "Vacuum",
    "open_ledger",
]


@runtime_checkable
class Requests(Protocol):
    """A run's requests for a person (proposals, as plain dict rows: routines/proposals.py
    keeps their rules) and a paused run's conversation (routines/conversation.py's JSON):
    routines/ledger/sqlrequests.py and memrequests.py."""

    def add_proposal(self, values: dict[str, object]) -> int: ...
    def proposal(self, proposal_id: int) -> dict[str, Any] | None: ...
    def proposals_of_run(self, run_id: str) -> list[dict[str, Any]]: ...
    def waiting_proposals(self, routine: str | None = None) -> list[dict[str, Any]]: ...
    def proposals_for_routine(self, routine: str, limit: int) -> list[dict[str, Any]]: ...
    def proposals_decided_since(self, routine: str, since: str | None) -> list[dict[str, Any]]: ...
    def waiting_proposal_count(self, now: str) -> int: ...
    def expire_proposals(self, now: str) -> int: ...
    def invalidate_proposals(
        self, routine: str, current: str | None, now: str, why: str, only: int | None = None
    ) -> int: ...
    def note_proposal(self, proposal_id: int, why: str) -> None: ...
    def claim_proposal(self, proposal_id: int, *, by: str, now: str, current: str) -> bool: ...
    def finish_proposal(
        self, proposal_id: int, *, exit_status: int | None, output: str, now: str
    ) -> None: ...
    def deny_proposal(self, proposal_id: int, *, by: str, why: str | None, now: str) -> bool: ...
    def prune_proposals(self, before: str, limit: int) -> int: ...
    def save_conversation(self, run_id: str, routine: str, body: str, now: str) -> None: ...
    def conversation(self, run_id: str) -> str | None: ...
    def prune_conversations(self, before: str, keep: Sequence[str], limit: int) -> int: ...


class LedgerAPI(Requests, Protocol):
    """One connection to a ledger, used from one thread: the fence, runs, state and money,
    and the requests for a person (`Requests`).
    Methods only tests call (`advance_cursor`, `is_claimed`, `oldest_run_start`) are the
    backends' own, not the contract's."""

    # -- the run fence (one transaction each) --
    def claim(
        self,
        routine: str,
        slot: str,
        *,
        run_id: str,
        trigger: Trigger,
        status: RunStatus,
        now: datetime,
        detail: str = "",
        owner: tuple[int, float] | None = None,
        expect_cursor: str | _Any | None = ANY,
    ) -> bool: ...

    # -- run rows --
    def record_run(
        self,
        routine: str,
        *,
        run_id: str,
        trigger: Trigger,
        status: RunStatus,
        now: datetime,
        slot: str | None = None,
        detail: str = "",
        owner: tuple[int, float] | None = None,
        parent_run_id: str | None = None,
    ) -> None: ...
    def start_run(self, run_id: str, *, now: datetime, worker_pid: int | None) -> None: ...
    def finish_run(
        self, run_id: str, end: RunEnd, *, now: datetime, strike: Strike | None = None
    ) -> Ended: ...
    def active_runs(self) -> list[ActiveRun]: ...
    def paused_runs(self) -> list[ActiveRun]: ...
    def end_pause(self, run_id: str, status: RunStatus, note: str, *, now: datetime) -> bool: ...
    def run(self, run_id: str) -> RunRow | None: ...
    def history(self, routine: str | None = None, limit: int = 20) -> list[RunRow]: ...
    def runs_between(self, start: datetime, end: datetime) -> list[RunRow]: ...
    def replies_to(self, run_ids: Sequence[str]) -> list[RunRow]: ...
    def thread(self, run_id: str) -> list[RunRow]: ...
    def last_runs(self) -> dict[str, LastRun]: ...
    def last_started_here(self, routine: str) -> str | None: ...

    # -- compacted history (routines/ledger/rundays.py) --
    def days(self, routine: str | None = None, limit: int = 20) -> list[DaySummary]: ...

    # -- money --
    def spent_on_day(self, routine: str, day: date, zone: ZoneInfo) -> float: ...
    def spent_today(self, routine: str, zone: ZoneInfo, now: datetime) -> float: ...
    def spent_today_many(
        self, zones: Mapping[str, ZoneInfo], now: datetime
    ) -> dict[str, float]: ...
    def totals(self, start: datetime, end: datetime) -> list[dict[str, Any]]: ...
    def dollars_by_day(self, days: Sequence[date], zone: ZoneInfo) -> dict[date, float]: ...

    # -- per-routine state --
    def state(self, routine: str) -> RoutineState: ...
    def states(self) -> dict[str, RoutineState]: ...
    def enable(
        self,
        routine: str,
        *,
        file_enabled: bool,
        file_identity: str,
        cursor: str,
        fingerprint: str,
    ) -> None: ...
    def disable(
        self,
        routine: str,
        *,
        file_enabled: bool,
        file_identity: str,
        reason: str | None = None,
        failure_streak: int | None = None,
    ) -> None: ...
    def rebind_override(self, routine: str, was: str | None, now: str) -> bool: ...
    def clear_override(self, routine: str) -> None: ...
    def set_failure_streak(self, routine: str, streak: int) -> None: ...
    def set_cursor(
        self, routine: str, cursor: str | None, fingerprint: str | None = None
    ) -> None: ...
    @property
    def data_version(self) -> int: ...

    def close(self) -> None: ...


class Maintenance(Protocol):
    """Retention, which only the daemon runs (supervisor/engine/housekeeping.py, the daily prune):
    runs folded into day rows, claims forgotten behind the cursor."""

    def compact(
        self, before: datetime, zone: ZoneInfo, limit: int = 500, keep_max: int | None = None
    ) -> int: ...
    def prune_claims(self, now: datetime, keep_max: int | None = None) -> int: ...


@runtime_checkable
class Vacuum(Protocol):
    """Giving freed pages back to the file system: SQLite's alone (PostgreSQL's autovacuum
    does it by itself, so `PgLedger` has no such methods)."""

    def enable_incremental_vacuum(self) -> bool: ...
    def incremental_vacuum(self, pages: int) -> int: ...


class Store(LedgerAPI, Maintenance, Protocol):
    """What the daemon holds: the ledger and its retention."""


class FleetAddress(Protocol):
    """Where a fleet's database is, and this machine's name in it: config.toml's [fleet]
    (routines/spec/config.py `FleetSettings`). A protocol, so the ledger imports no config."""

    @property
    def database(self) -> str: ...
    @property
    def machine(self) -> str: ...


def open_ledger(
    path: Path, fleet: FleetAddress | None, *, connect: bool = True, read_only: bool = False
) -> Store:
    """The fleet's PostgreSQL ledger when config.toml has [fleet] (`fleet`), else this
    machine's SQLite file at `path` (`read_only`: opened so, as the dashboard reads it). The
    one decision of which ledger a reader sees: the CLI (supervisor/fleet/view.py cli_ledger)
    and the dashboard call it. psycopg is imported here, only for a fleet."""
    if fleet is None:
        return Ledger.read_only(path) if read_only else Ledger(path)
    from routines.ledger.postgres import PgLedger
    from routines.ledger.postgres_open import CALL_DEADLINE_SEC, FIRST_CONNECTION_SEC

    # The daemon's deadline: a command on a hung server fails as an outage, never hangs.
    return PgLedger(
        fleet.database,
        fleet.machine,
        connect=connect,
        deadline=CALL_DEADLINE_SEC,
        connect_within=FIRST_CONNECTION_SEC,
    )


def _conforms(
    sqlite: Ledger, pg: PgLedger, memory: MemoryLedger
) -> tuple[Store, Store, Store, Vacuum]:
    """Never called: mypy checks here that the three stores keep the contract."""
    return sqlite, pg, memory, sqlite
