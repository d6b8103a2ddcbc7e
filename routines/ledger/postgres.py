"""The fleet's ledger: the same contract as routines/ledger/sqlite.py's SQLite `Ledger`, in
PostgreSQL (psycopg 3), shared by one person's machines. Imported only when config.toml has
`[fleet]`.

Tables (one per concern; schema and migrations in routines/ledger/migrate_postgres.py, beside
SQLite's):
- runs, claims, routine_state, run_days: as in SQLite, plus the machine that ran each run.
- leases: one row per queued or running run, renewed by its machine's daemon
  (`renew`); a lease that lapsed marks its run `interrupted` (`expire_leases`), never replayed.
- machines: each machine's heartbeat, version and whether it left the fleet.
- definitions: each routine's definition fingerprint per machine (divergence).
The last three are routines/ledger/fleet.py's, a mixin of `PgLedger`.

Time: run rows keep the machine's clock as ISO text, exactly as SQLite (history, budgets and
compaction read them alike). Leases and heartbeats use the server's clock (`now()`), so a
machine whose clock is off cannot make a lease look alive or dead.

Invariant: a claim, its run row, its lease and the routine's cursor move in one transaction,
under a row lock on the routine's state, so two machines planning the same routine serialise
(tests/fleet/test_ledger_contract.py::
test_two_machines_claiming_one_routine_at_once_one_wins_each_round).

The connection, its deadline and its errors are routines/ledger/postgres_open.py's; the
queries and the contract's rules are routines/ledger/sqlstore.py's `SqlLedger`, SQLite's too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from routines.ledger.fleet import LEASE_SEC, FleetTables, MachineInUse, MachineRow
from routines.ledger.migrate_postgres import PG_LEDGER_VERSION
from routines.ledger.model import RunRow
from routines.ledger.postgres_open import Gate, PgConnection
from routines.ledger.shared import iso
from routines.ledger.sql import PG
from routines.ledger.sqlstore import SqlLedger, Tx, _row
from routines.runs import ACTIVE, NO_LAST_RUN, RunStatus, sql_in

__all__ = [
    "LEASE_SEC",
    "PG_LEDGER_VERSION",
    "FleetRunRow",
    "Gate",
    "MachineInUse",
    "MachineRow",
    "PgLedger",
]


_DATA_VERSION_SQL = (
    "SELECT md5(COALESCE((SELECT string_agg(concat_ws('/', routine, enabled_override, "
    "file_enabled_seen, file_identity, failure_streak, disabled_reason, cursor, "
    "schedule_fingerprint, "
    "last_run_id, last_status), ',' ORDER BY routine) FROM routine_state), '') || '|' || "
    "COALESCE((SELECT string_agg(run_id || '/' || machine, ',' ORDER BY run_id) FROM leases "
    "WHERE expires_at > now()), '') || '|' || "
    "COALESCE((SELECT string_agg(d.routine || '/' || d.machine || '/' || d.fingerprint, ',' "
    "ORDER BY d.routine, d.machine) FROM definitions d JOIN machines m "
    "ON m.machine = d.machine WHERE m.left_at IS NULL "
    "AND m.heartbeat > now() - make_interval(secs => %s)), '')) AS digest"
)
_LAST_STARTED_HERE_SQL = (
    "SELECT started_at FROM runs WHERE routine = %s AND machine = %s "
    f"AND COALESCE(status, '') NOT IN {sql_in(NO_LAST_RUN)} "
    "ORDER BY started_at DESC LIMIT 1"
)


@dataclass(frozen=True, slots=True)
class FleetRunRow:
    """A run with the machine that ran it (`history` on a fleet)."""

    row: RunRow
    machine: str


class PgLedger(PgConnection, SqlLedger, FleetTables):
    """One connection to the fleet's database, for one thread (the daemon's loop, or a CLI).

    The connection opens lazily and reopens after a failure (through `gate`), so a daemon
    starts, and keeps its control socket, while PostgreSQL is down."""

    Q = PG
    TEXT_AS_BYTES = True  # a proposal's free texts: PostgreSQL's TEXT refuses NUL
    INSERT_RETURNS = True

    def __init__(
        self,
        dsn: str,
        machine: str,
        *,
        gate: Gate | None = None,
        lease_sec: float = LEASE_SEC,
        connect: bool = True,
        instance: str | None = None,
        taken_after: float = 0.0,
        deadline: float | None = None,
        on_lease: Callable[[str, float, float], None] | None = None,
        lease_clock: Callable[[], float] = time.monotonic,
        connect_within: float | None = None,
    ) -> None:
        self.machine = machine
        self.lease_sec = lease_sec
        self.instance = instance  # this daemon's start (fleet.py: one daemon per name)
        self.taken_after = taken_after
        # Told (run id, before, after) on `lease_clock` for each lease a claim or a queued
        # run's row made: the fleet gives its worker a deadline from `before`
        # (supervisor/fleet/member.py LeaseBook).
        self.on_lease = on_lease
        self.lease_clock = lease_clock
        super().__init__(
            dsn, gate=gate, connect=connect, deadline=deadline, connect_within=connect_within
        )

    @property
    def data_version(self) -> int:
        """Changes when what the daemon reads each tick may have: the routines' state, the
        live leases (who runs what), or the definitions of the machines up now. A digest the
        server computes (one short row), so an idle tick reads nothing else, as SQLite's
        PRAGMA data_version lets it (tests/fleet/test_ledger_contract.py)."""
        rows = self._read(_DATA_VERSION_SQL, (self.lease_sec,))
        return int(rows[0]["digest"][:15], 16)

    # -- the fleet's part of the contract (sqlstore.py's hooks) ---------------------------

    def _own(self) -> dict[str, object]:
        return {"machine": self.machine}

    def _mine(self) -> tuple[str, tuple[object, ...]]:
        return " AND machine = %s", (self.machine,)

    def _lock_routine(self, tx: Tx, routine: str) -> None:
        # The routine's state row is locked first (`Q.cursor`'s FOR UPDATE), so every
        # machine's claims of one routine happen one after the other.
        tx.execute(self.Q.ensure_state(), (routine,))
        tx.execute(self.Q.cursor(), (routine,))

    def _run_opened(self, tx: Tx, routine: str, run_id: str) -> None:
        tx.execute(
            "INSERT INTO leases (run_id, routine, machine, instance, expires_at) "
            "VALUES (%s, %s, %s, %s, now() + make_interval(secs => %s))",
            (run_id, routine, self.machine, self.instance, self.lease_sec),
        )

    def _run_ended(self, tx: Tx, run_id: str) -> None:
        tx.execute("DELETE FROM leases WHERE run_id = %s", (run_id,))

    def _lease_clock(self) -> float:
        return self.lease_clock()

    def _leased(self, run_id: str, status: RunStatus, before: float) -> None:
        if status in ACTIVE and self.on_lease is not None:
            self.on_lease(run_id, before, self.lease_clock())

    # -- what only a fleet has ------------------------------------------------------------

    def last_started_here(self, routine: str) -> str | None:
        """When this machine's newest finished run of `routine` started: since then, the
        decisions on the proposals kept here are news to its next run (a fleet shares no
        proposals; a machine's proposals come from its own runs)."""
        rows = self._read(_LAST_STARTED_HERE_SQL, (routine, self.machine))
        return str(rows[0]["started_at"]) if rows else None

    def fleet_history(self, routine: str | None = None, limit: int = 20) -> list[FleetRunRow]:
        """Runs newest first with the machine of each (all routines when `routine` is None)."""
        args = [routine] if routine else []
        rows = self._read(self.Q.history(bool(routine), "machine, "), (*args, limit))
        return [FleetRunRow(_row(r), r["machine"]) for r in rows]

    def fleet_runs_between(self, start: datetime, end: datetime) -> list[FleetRunRow]:
        """Runs of every routine and machine that started in [start, end), newest first."""
        rows = self._read(self.Q.runs_between("machine, "), (iso(start), iso(end)))
        return [FleetRunRow(_row(r), r["machine"]) for r in rows]
