"""The fleet ledger's PostgreSQL schema, migrated forward by `PgLedger` (one step a version,
under an advisory lock so two machines starting at once migrate once). Beside SQLite's steps
in routines/ledger/sqlite.py; the tables are SQLite's plus the fleet's own (leases, machines,
definitions), one per concern."""

from __future__ import annotations

from routines.ledger import rundays
from routines.runs import ACTIVE, sql_in

__all__ = [
    "MIGRATION_LOCK",
    "PG_LEDGER_VERSION",
    "STEPS",
]

PG_LEDGER_VERSION = 5

T = 'TEXT COLLATE "C"'  # byte order, as SQLite compares: ISO times and slot ids sort as text

STEPS: dict[int, tuple[str, ...]] = {
    1: (
        f"""CREATE TABLE runs (
            id BIGSERIAL PRIMARY KEY,
            run_id {T} NOT NULL UNIQUE,
            routine {T} NOT NULL,
            machine {T} NOT NULL,
            slot {T}, trigger {T}, status {T}, outcome {T}, detail TEXT,
            started_at {T}, finished_at {T}, duration_sec DOUBLE PRECISION,
            route TEXT, model TEXT, escalated INTEGER, escalated_reason TEXT,
            input_tokens BIGINT, output_tokens BIGINT,
            local_input_tokens BIGINT, local_output_tokens BIGINT,
            tool_calls INTEGER, tools_used TEXT, dollars DOUBLE PRECISION, output_file TEXT,
            owner_pid INTEGER, owner_started DOUBLE PRECISION, worker_pid INTEGER,
            parent_run_id {T}
        )""",
        "CREATE INDEX runs_parent ON runs(parent_run_id) WHERE parent_run_id IS NOT NULL",
        "CREATE INDEX runs_routine_started ON runs(routine, started_at)",
        "CREATE INDEX runs_started ON runs(started_at)",
        f"CREATE INDEX runs_active ON runs(status) WHERE status IN {sql_in(ACTIVE)}",
        f"""CREATE TABLE claims (
            routine {T} NOT NULL,
            slot {T} NOT NULL,
            claimed_at {T} NOT NULL,
            run_id {T},
            machine {T},
            PRIMARY KEY (routine, slot)
        )""",
        f"""CREATE TABLE routine_state (
            routine {T} PRIMARY KEY,
            enabled_override INTEGER,
            file_enabled_seen INTEGER,
            failure_streak INTEGER NOT NULL DEFAULT 0,
            disabled_reason TEXT,
            cursor {T},
            schedule_fingerprint TEXT,
            updated_at {T},
            last_run_id {T}, last_status {T}, last_outcome {T},
            last_started {T}, last_finished {T}
        )""",
        *(
            s.replace("INTEGER NOT NULL", "BIGINT NOT NULL").replace("TEXT", T)
            for s in rundays.SCHEMA
        ),
        f"""CREATE TABLE leases (
            run_id {T} PRIMARY KEY,
            routine {T} NOT NULL,
            machine {T} NOT NULL,
            expires_at TIMESTAMPTZ NOT NULL
        )""",
        "CREATE INDEX leases_machine ON leases(machine)",
        f"""CREATE TABLE machines (
            machine {T} PRIMARY KEY,
            version TEXT,
            pid INTEGER,
            joined_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            heartbeat TIMESTAMPTZ,
            left_at TIMESTAMPTZ
        )""",
        f"""CREATE TABLE definitions (
            routine {T} NOT NULL,
            machine {T} NOT NULL,
            fingerprint TEXT NOT NULL,
            seen_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            PRIMARY KEY (routine, machine)
        )""",
    ),
    # One daemon per machine name: each daemon start takes a random instance id; its leases
    # and its machine row carry it, so a second daemon under the same name renews nothing of
    # the first's and is refused while the first is alive (routines/ledger/fleet.py `register`).
    2: (
        "ALTER TABLE leases ADD COLUMN instance TEXT",
        "ALTER TABLE machines ADD COLUMN instance TEXT",
        "ALTER TABLE machines ADD COLUMN host TEXT",
        "ALTER TABLE machines ADD COLUMN boot_id TEXT",
        "ALTER TABLE machines ADD COLUMN conflict TEXT",
    ),
    # SQLite's runs keep a v2.0.x exit_status where they have no status; with the column here
    # too, both backends run the same query texts (routines/ledger/sql.py).
    3: (f"ALTER TABLE runs ADD COLUMN exit_status {T}",),
    # SQLite's step 10: an override is bound to the file it was made for (RoutineState.enabled).
    4: ("ALTER TABLE routine_state ADD COLUMN file_identity TEXT",),
    # An auto run whose escalation could not happen: the model it tried (`model` answered).
    5: ("ALTER TABLE runs ADD COLUMN tried_model TEXT",),
}
MIGRATION_LOCK = 0x76696E6F73  # pg_advisory_xact_lock key: one migrating machine at a time
