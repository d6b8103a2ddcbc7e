"""The SQLite ledger's schema, step by step, and the upgrade that brings a file to the
current one inside the caller's transaction (a kill mid-way leaves the previous schema:
tests/routines/ledger/test_ledger_unpack.py kills one).

Schema versions (PRAGMA user_version), forward only, each step an ALTER TABLE ADD COLUMN:
  1  v2.0.4  runs: tokens, dollars, duration, exit status
  2  v2.0.5  + tool_calls, tools_used
  3  v2.0.6  + route, escalated, escalated_reason, local_input_tokens, local_output_tokens
  4  v2.1    + run_id, slot, trigger, status, outcome, detail, finished_at, output_file,
               owner_pid, owner_started, worker_pid; tables claims and routine_state
  5  v2.2    table run_days (compacted history, routines/ledger/rundays.py); routine_state + each
             routine's last run (last_run_id, last_status, last_outcome, last_started,
             last_finished), filled from runs once; auto_vacuum = INCREMENTAL (a VACUUM, once)
  6          a packed layout (routines/ledger/migrate_packed6.py): runs and claims as views
             over run_log and fence. Withdrawn: a ledger below 6 never takes it, one at 6 to 8
             is unpacked by 9
  7          table proposals: proposed actions, their decisions (routines/proposals.py)
  8          + parent_run_id (trigger "reply": the run whose conversation it continues)
  9          plain tables again (routines/ledger/migrate_unpack.py): the packed runs and claims of
             schemas 6 to 8 unpacked in place; a plain ledger has nothing to do
  10         routine_state + file_identity: the file an enable/disable override was made for
             (RoutineState.enabled); a row from before has none until the daemon binds it
  11         + tried_model: the premium model an escalation wanted and could not reach (no
             key, the premium leg down), beside `model`, the local model whose answer was kept
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

from routines.ledger import migrate_unpack, rundays
from routines.runs import ACTIVE, NO_LAST_RUN, sql_in

__all__ = ["LEDGER_VERSION", "SLOW_UPGRADE_ROWS", "STEPS", "V1", "upgrade"]

LEDGER_VERSION = 11
SLOW_UPGRADE_ROWS = 50_000  # a bigger ledger's upgrade says so first (it takes a while)

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
# Each step after v1: the columns it adds to runs, then any other statements.
STEPS: dict[int, tuple[tuple[str, ...], tuple[str, ...]]] = {
    2: (("tool_calls INTEGER", "tools_used TEXT"), ()),
    3: (
        (
            "route TEXT",
            "escalated INTEGER",
            "escalated_reason TEXT",
            "local_input_tokens INTEGER",
            "local_output_tokens INTEGER",
        ),
        (),
    ),
    4: (
        (
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
        ),
        (
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
        ),
    ),
    5: (
        (),
        (
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
        ),
    ),
    6: ((), ()),  # the packed layout, withdrawn: nothing for a plain ledger (see 9)
    7: (
        (),
        (
            # One row per propose_action call; `state` moves only forward, by conditional
            # UPDATEs in routines/proposals.py (waiting → running → done, or waiting →
            # denied | expired | invalidated), so one decision is ever taken per proposal.
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
        ),
    ),
    # `reply RUN TEXT`: a reply run names the run it continues; history shows the thread.
    8: (
        ("parent_run_id TEXT",),
        (_PARENT_INDEX,),
    ),
    9: ((), ()),  # unpacks a packed ledger (`_unpack`); a plain one is plain already
    # An override is bound to the file it was made for (its Routine.identity): a leftover
    # override never turns on another file of that name (routines/ledger/model.py).
    10: ((), ("ALTER TABLE routine_state ADD COLUMN file_identity TEXT",)),
    # An auto run whose escalation could not happen: the model it tried (`model` answered).
    11: (("tried_model TEXT",), ()),
}
_UNPACKED = 9  # the unpacking makes runs as steps 1 to 9 leave it; later steps ALTER it
_PACKED = range(6, 9)  # the schemas whose runs and claims were views over packed tables

# runs' columns after id, in the order the steps added them up to 9 (what schema 9 unpacks a
# packed one into).
_PLAIN_COLUMNS = tuple(
    line.split()[0]
    for line in V1.strip().splitlines()[2:-1]  # between "id INTEGER PRIMARY KEY," and ")"
) + tuple(c.split()[0] for n in sorted(STEPS) if n <= _UNPACKED for c in STEPS[n][0])


def _runs_table(name: str) -> str:
    """CREATE TABLE of a plain runs table called `name`, as steps 1 to 8 leave it."""
    types = [line.strip().rstrip(",") for line in V1.strip().splitlines()[2:-1]]
    types += [c for n in sorted(STEPS) if n <= _UNPACKED for c in STEPS[n][0]]
    return f"CREATE TABLE {name} (id INTEGER PRIMARY KEY, {', '.join(types)})"


def upgrade(db: sqlite3.Connection, path: Path, version: int) -> None:
    """Bring the ledger at `path`, at schema `version` (older than LEDGER_VERSION, checked by
    the caller), to LEDGER_VERSION, in the caller's transaction on `db`."""
    if version == 0:
        has_runs = db.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='runs'"
        ).fetchone()
        if not has_runs:
            db.execute(V1)
        version = 1  # v2.0.4 shipped without user_version: a runs table means schema 1
    noisy = _slow(db, version)
    if noisy:
        # A year of minutely runs takes tens of seconds: said on stderr, so a command that
        # seems stuck is not killed half-way (a kill is harmless anyway: it only starts over).
        print(
            f"{path}: upgrading the ledger from schema {version} to {LEDGER_VERSION}, "
            "once; this takes a while",
            file=sys.stderr,
            flush=True,
        )
    packed = version in _PACKED
    for step in range(version + 1, LEDGER_VERSION + 1):
        if packed and step == 8:
            continue  # the unpacking (9) makes runs with parent_run_id and its index
        if packed and step == 9:
            _unpack(db, path, noisy)
            continue
        columns, statements = STEPS[step]
        for column in columns:
            db.execute(f"ALTER TABLE runs ADD COLUMN {column}")
        for statement in statements:
            db.execute(statement)
    db.execute(f"PRAGMA user_version = {LEDGER_VERSION}")


def _slow(db: sqlite3.Connection, version: int) -> bool:
    """Whether the upgrade from `version` is of a ledger big enough to say so."""
    if version >= LEDGER_VERSION or version < 4:
        return False
    # Packed rowids are seconds << 24, not a count: count those rows (once, here).
    count = "COUNT(*) FROM run_log" if version in _PACKED else "MAX(rowid) FROM runs"
    rows: int = db.execute(f"SELECT {count}").fetchone()[0] or 0
    return rows > SLOW_UPGRADE_ROWS


def _unpack(db: sqlite3.Connection, path: Path, noisy: bool) -> None:
    """Step 9 on a packed ledger (routines/ledger/migrate_unpack.py), saying how far it is."""

    def progress(done: int, total: int) -> None:
        print(f"{path}: {done:,} of {total:,} runs unpacked", file=sys.stderr, flush=True)

    migrate_unpack.unpack(
        db,
        _runs_table("runs_plain"),
        _CLAIMS.replace("TABLE claims", "TABLE claims_plain"),
        _PLAIN_COLUMNS,
        (*_RUN_INDEXES, _PARENT_INDEX),
        progress if noisy else None,
    )
