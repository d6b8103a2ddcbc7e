"""The fleet ledger's PostgreSQL schema, as named steps (routines/ledger/migrations.py) that
`PgLedger` applies under an advisory lock, so two machines starting at once migrate once.
Beside SQLite's steps in routines/ledger/migrate_sqlite.py; the tables are SQLite's plus the
fleet's own (leases, machines, definitions), one per concern.

A database from before named steps kept its number in ledger_meta ('version', 1 to 5); each
step says the number it came with, so such a database upgrades in place. One with named steps
says PG_LEDGER_VERSION (6) there, so a release from before refuses it as newer."""

from __future__ import annotations

from typing import Any

import psycopg

from routines.ledger import rundays
from routines.ledger.migrations import Step
from routines.runs import ACTIVE, sql_in

__all__ = [
    "MIGRATION_LOCK",
    "PG_LEDGER_VERSION",
    "STEPS",
    "Cursor",
]

PG_LEDGER_VERSION = 6  # ledger_meta's 'version' once steps are named (5: the last number)

T = 'TEXT COLLATE "C"'  # byte order, as SQLite compares: ISO times and slot ids sort as text

_STATEMENTS: dict[int, tuple[str, ...]] = {
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

Cursor = psycopg.Cursor[dict[str, Any]]


def _each(cur: Cursor, number: int) -> None:
    for statement in _STATEMENTS[number]:
        cur.execute(statement)


def m001_tables(cur: Cursor) -> None:
    _each(cur, 1)


def m002_instances(cur: Cursor) -> None:
    _each(cur, 2)


def m003_exit_status(cur: Cursor) -> None:
    _each(cur, 3)


def m004_override_file(cur: Cursor) -> None:
    _each(cur, 4)


def m005_tried_model(cur: Cursor) -> None:
    _each(cur, 5)


def m006_proposals(cur: Cursor) -> None:
    """A run's requests for a person, the fleet's as its runs are: any machine answers one
    and resumes its paused run (routines/ledger/sqlrequests.py). SQLite's m007_proposals; the
    free texts BYTEA, as they may hold a NUL (sqlrequests.py `BLOBS`)."""
    cur.execute(
        f"""CREATE TABLE proposals (
            id BIGSERIAL PRIMARY KEY,
            routine {T} NOT NULL,
            run_id {T} NOT NULL,
            action {T} NOT NULL,
            command BYTEA NOT NULL,
            input BYTEA NOT NULL,
            summary BYTEA NOT NULL,
            fingerprint {T} NOT NULL,
            created_at {T} NOT NULL,
            expires_at {T} NOT NULL,
            state {T} NOT NULL DEFAULT 'waiting',
            decided_by {T},
            decided_at {T},
            why BYTEA,
            exit_status INTEGER,
            output BYTEA,
            finished_at {T}
        )"""
    )
    cur.execute("CREATE INDEX proposals_state ON proposals(state)")
    cur.execute("CREATE INDEX proposals_run ON proposals(run_id)")
    cur.execute("CREATE INDEX proposals_routine_decided ON proposals(routine, decided_at)")


def m007_conversations(cur: Cursor) -> None:
    """A paused run's conversation (SQLite's m012_conversations)."""
    cur.execute(
        f"CREATE TABLE conversations (run_id {T} PRIMARY KEY, routine {T} NOT NULL, "
        f"saved_at {T} NOT NULL, body TEXT NOT NULL)"
    )


# In order; a name never changes once released (a database records it).
STEPS: tuple[Step[Cursor], ...] = (
    Step("m001_tables", 1, m001_tables),
    Step("m002_instances", 2, m002_instances),
    Step("m003_exit_status", 3, m003_exit_status),
    Step("m004_override_file", 4, m004_override_file),
    Step("m005_tried_model", 5, m005_tried_model),
    Step("m006_proposals", 0, m006_proposals),
    Step("m007_conversations", 0, m007_conversations),
)
MIGRATION_LOCK = 0x76696E6F73  # pg_advisory_xact_lock key: one migrating machine at a time
