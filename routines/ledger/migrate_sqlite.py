"""The SQLite ledger's schema, as named steps (routines/ledger/migrations.py), and the upgrade
that brings a file to the current one inside the caller's transaction (a kill mid-way leaves
the previous schema: nothing of an upgrade is committed until all of it is).

Each step is a function, recorded by name in the table ledger_migrations once applied. A ledger
from before named steps kept a number (PRAGMA user_version); each step says the number it came
with, so such a file upgrades in place:
  1  v2.0.4  m001_runs: tokens, dollars, duration, exit status (v2.0.4 wrote no number: 0
             with a runs table is 1)
  2  v2.0.5  m002_tools: + tool_calls, tools_used
  3  v2.0.6  m003_routes: + route, escalated, escalated_reason, local tokens
  4  v2.1    m004_fence: + run_id, slot, trigger, status, outcome, detail, finished_at,
             output_file, owner_pid, owner_started, worker_pid; tables claims, routine_state
  5  v2.2    m005_run_days: table run_days (routines/ledger/rundays.py); each routine's last
             run in routine_state, filled from runs once; auto_vacuum = INCREMENTAL (a VACUUM,
             once, by the caller)
  6  -       a packed layout no release shipped, withdrawn: never a step here (`packed_error`)
  7          m007_proposals: table proposals (routines/proposals.py)
  8          m008_replies: + parent_run_id (trigger "reply")
  9  -       unpacked the withdrawn layout: nothing for a plain ledger
  10         m010_override_file: routine_state + file_identity (RoutineState.enabled)
  11         m011_tried_model: + tried_model, the premium model an escalation could not reach
Steps of the named era (no number):
             m012_conversations: table conversations, a paused run's conversation
             (routines/ledger/sqlrequests.py)
A ledger with named steps has user_version LEDGER_VERSION (12), one past the last number, so a
release from before refuses it as newer, untouched.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

from routines.ledger import migrations, rundays
from routines.ledger.migrations import Step
from routines.ledger.model import LedgerError
from routines.runs import ACTIVE, NO_LAST_RUN, sql_in

__all__ = [
    "LEDGER_VERSION",
    "SLOW_UPGRADE_ROWS",
    "STEPS",
    "V1",
    "applied",
    "legacy_steps",
    "packed_error",
    "pending",
    "upgrade",
]

LEDGER_VERSION = 12  # user_version of a ledger whose steps are named in ledger_migrations
LAST_NUMBERED = 11  # the last schema number a release wrote before named steps
SLOW_UPGRADE_ROWS = 50_000  # a bigger ledger's upgrade says so first (it takes a while)
_PACKED = range(6, 9)  # the numbers the withdrawn packed layout was written under

V1 = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    routine TEXT NOT NULL,
    started_at TEXT,
    model TEXT,
    input_tokens INTEGER,
    output_tokens INTEGER,
    dollars REAL,
    duration_sec REAL,
    exit_status TEXT
)
"""
_RUN_INDEXES = (
    "CREATE UNIQUE INDEX runs_run_id ON runs(run_id)",
    "CREATE INDEX runs_routine_started ON runs(routine, started_at)",
    "CREATE INDEX runs_started ON runs(started_at)",
    f"CREATE INDEX runs_active ON runs(status) WHERE status IN {sql_in(ACTIVE)}",
)
_PARENT_INDEX = "CREATE INDEX runs_parent ON runs(parent_run_id) WHERE parent_run_id IS NOT NULL"
_CLAIMS = """CREATE TABLE claims (
    routine TEXT NOT NULL,
    slot TEXT NOT NULL,
    claimed_at TEXT NOT NULL,
    run_id TEXT,
    PRIMARY KEY (routine, slot)
)"""


def _add(db: sqlite3.Connection, *columns: str) -> None:
    for column in columns:
        db.execute(f"ALTER TABLE runs ADD COLUMN {column}")


def _run(db: sqlite3.Connection, *statements: str) -> None:
    for statement in statements:
        db.execute(statement)


def m001_runs(db: sqlite3.Connection) -> None:
    db.execute(V1)


def m002_tools(db: sqlite3.Connection) -> None:
    _add(db, "tool_calls INTEGER", "tools_used TEXT")


def m003_routes(db: sqlite3.Connection) -> None:
    _add(
        db,
        "route TEXT",
        "escalated INTEGER",
        "escalated_reason TEXT",
        "local_input_tokens INTEGER",
        "local_output_tokens INTEGER",
    )


def m004_fence(db: sqlite3.Connection) -> None:
    _add(
        db,
        "run_id TEXT",
        "slot TEXT",
        "trigger TEXT",
        "status TEXT",
        "outcome TEXT",
        "detail TEXT",
        "finished_at TEXT",
        "output_file TEXT",
        "owner_pid INTEGER",
        "owner_started REAL",
        "worker_pid INTEGER",
    )
    _run(
        db,
        *_RUN_INDEXES,
        _CLAIMS,
        """CREATE TABLE routine_state (
            routine TEXT PRIMARY KEY,
            enabled_override INTEGER,
            file_enabled_seen INTEGER,
            failure_streak INTEGER NOT NULL DEFAULT 0,
            disabled_reason TEXT,
            cursor TEXT,
            schedule_fingerprint TEXT,
            updated_at TEXT
        )""",
    )


def m005_run_days(db: sqlite3.Connection) -> None:
    _run(
        db,
        *rundays.SCHEMA,
        *(
            f"ALTER TABLE routine_state ADD COLUMN {c} TEXT"
            for c in ("last_run_id", "last_status", "last_outcome", "last_started")
        ),
        "ALTER TABLE routine_state ADD COLUMN last_finished TEXT",
        # Each routine's newest finished run, once (one index lookup per routine).
        "INSERT INTO routine_state (routine, last_run_id, last_status, last_outcome, "
        "last_started, last_finished) "
        "SELECT routine, run_id, COALESCE(status, exit_status), outcome, started_at, "
        "finished_at FROM runs WHERE id IN ("
        "SELECT (SELECT r2.id FROM runs r2 WHERE r2.routine = g.routine AND "
        f"COALESCE(r2.status, r2.exit_status) NOT IN {sql_in(NO_LAST_RUN)} "
        "ORDER BY r2.started_at DESC, r2.id DESC LIMIT 1) "
        "FROM (SELECT DISTINCT routine FROM runs) g) "
        "ON CONFLICT(routine) DO UPDATE SET last_run_id = excluded.last_run_id, "
        "last_status = excluded.last_status, last_outcome = excluded.last_outcome, "
        "last_started = excluded.last_started, last_finished = excluded.last_finished",
    )


def m007_proposals(db: sqlite3.Connection) -> None:
    # One row per propose_action call; `state` moves only forward, by conditional UPDATEs in
    # routines/proposals.py (waiting → running → done, or waiting → denied | expired |
    # invalidated), so one decision is ever taken per proposal.
    _run(
        db,
        """CREATE TABLE proposals (
            id INTEGER PRIMARY KEY,
            routine TEXT NOT NULL,
            run_id TEXT NOT NULL,
            action TEXT NOT NULL,
            command TEXT NOT NULL,
            input TEXT NOT NULL,
            summary TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            created_at TEXT NOT NULL,
            expires_at TEXT NOT NULL,
            state TEXT NOT NULL DEFAULT 'waiting',
            decided_by TEXT,
            decided_at TEXT,
            why TEXT,
            exit_status INTEGER,
            output TEXT,
            finished_at TEXT
        )""",
        "CREATE INDEX proposals_state ON proposals(state)",
        "CREATE INDEX proposals_routine_decided ON proposals(routine, decided_at)",
    )


def m008_replies(db: sqlite3.Connection) -> None:
    """`reply RUN TEXT`: a reply run names the run it continues; history shows the thread."""
    _add(db, "parent_run_id TEXT")
    db.execute(_PARENT_INDEX)


def m010_override_file(db: sqlite3.Connection) -> None:
    """An override is bound to the file it was made for (its Routine.identity): a leftover
    override never turns on another file of that name (routines/ledger/model.py)."""
    db.execute("ALTER TABLE routine_state ADD COLUMN file_identity TEXT")


def m011_tried_model(db: sqlite3.Connection) -> None:
    """An auto run whose escalation could not happen: the model it tried (`model` answered)."""
    _add(db, "tried_model TEXT")


def m012_conversations(db: sqlite3.Connection) -> None:
    """A paused run's conversation, kept in the ledger with its request (the proposals), so
    whichever process resumes the run reads it there (routines/ledger/sqlrequests.py)."""
    db.execute(CONVERSATIONS)
    db.execute("CREATE INDEX proposals_run ON proposals(run_id)")  # a paused run's request


# The same table in both databases (routines/ledger/migrate_postgres.py m007_conversations).
CONVERSATIONS = (
    "CREATE TABLE conversations (run_id TEXT PRIMARY KEY, routine TEXT NOT NULL, "
    "saved_at TEXT NOT NULL, body TEXT NOT NULL)"
)


# In order; a name never changes once released (a ledger records it).
STEPS: tuple[Step[sqlite3.Connection], ...] = (
    Step("m001_runs", 1, m001_runs),
    Step("m002_tools", 2, m002_tools),
    Step("m003_routes", 3, m003_routes),
    Step("m004_fence", 4, m004_fence),
    Step("m005_run_days", 5, m005_run_days),
    Step("m007_proposals", 7, m007_proposals),
    Step("m008_replies", 8, m008_replies),
    Step("m010_override_file", 10, m010_override_file),
    Step("m011_tried_model", 11, m011_tried_model),
    Step("m012_conversations", 0, m012_conversations),
)


def legacy_steps(version: int) -> tuple[Step[sqlite3.Connection], ...]:
    """The steps a ledger of schema number `version` (before named steps) had applied: how
    such a file was laid out (tests build old ledgers with them)."""
    done = migrations.applied_before(STEPS, version)
    return tuple(s for s in STEPS if s.name in done)


def _has_table(db: sqlite3.Connection, name: str) -> bool:
    row = db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone()
    return row is not None


def applied(db: sqlite3.Connection, path: Path) -> frozenset[str]:
    """The steps the ledger at `path` has applied: from ledger_migrations, or, in a file from
    before named steps, from its number. LedgerError for a packed file (`packed_error`)."""
    version: int = db.execute("PRAGMA user_version").fetchone()[0]
    if version >= LEDGER_VERSION:
        if not _has_table(db, "ledger_migrations"):
            return frozenset()
        return frozenset(r[0] for r in db.execute("SELECT name FROM ledger_migrations"))
    if version in _PACKED and _has_table(db, "run_log"):
        raise packed_error(path, version)
    if version == 0 and _has_table(db, "runs"):
        version = 1  # v2.0.4 shipped without user_version: a runs table means schema 1
    return migrations.applied_before(STEPS, version)


def pending(db: sqlite3.Connection, path: Path) -> list[Step[sqlite3.Connection]]:
    """The steps still to apply to the ledger at `path` (none: it is current); LedgerError
    when it has steps this program does not know, or is packed."""
    return migrations.pending(STEPS, applied(db, path), str(path))


def packed_error(path: Path, version: int) -> LedgerError:
    """A ledger in the packed layout (run_log and fence behind views, schemas 6 to 8): no
    release wrote it, and this one reads it no more. A build from between those commits that
    made one unpacks it (its step 9), and this one then upgrades the plain file."""
    return LedgerError(
        f"{path}: a ledger in the withdrawn packed layout (schema {version}, table run_log), "
        "which no release wrote and this version cannot read. Open it once with a "
        "vinos-routine built from before named ledger migrations (its step 9 unpacks it in "
        "place), then with this one; or move it aside to start a new ledger; it was not touched"
    )


def upgrade(db: sqlite3.Connection, path: Path) -> bool:
    """Apply the ledger's pending steps in the caller's transaction on `db`, each recorded by
    name, and stamp LEDGER_VERSION; False when there were none (nothing written)."""
    done = applied(db, path)
    todo = migrations.pending(STEPS, done, str(path))
    version: int = db.execute("PRAGMA user_version").fetchone()[0]
    if not todo and version == LEDGER_VERSION:
        return False
    if todo and _slow(db):
        # A year of minutely runs takes tens of seconds: said on stderr, so a command that
        # seems stuck is not killed half-way (a kill is harmless anyway: it only starts over).
        print(
            f"{path}: upgrading the ledger ({len(todo)} step(s)), once; this takes a while",
            file=sys.stderr,
            flush=True,
        )
    db.execute(migrations.TABLE)
    stamp = "SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
    for name in sorted(done):  # a numbered ledger's steps, recorded by name once
        db.execute(f"INSERT OR IGNORE INTO ledger_migrations VALUES (?, ({stamp}))", (name,))
    for step in todo:
        step.apply(db)
        db.execute(f"INSERT OR REPLACE INTO ledger_migrations VALUES (?, ({stamp}))", (step.name,))
    db.execute(f"PRAGMA user_version = {LEDGER_VERSION}")
    return True


def _slow(db: sqlite3.Connection) -> bool:
    """Whether the upgrade is of a ledger big enough to say so."""
    if not _has_table(db, "runs"):
        return False
    rows: int = db.execute("SELECT MAX(rowid) FROM runs").fetchone()[0] or 0
    return rows > SLOW_UPGRADE_ROWS
