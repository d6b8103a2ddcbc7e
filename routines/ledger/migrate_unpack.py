"""Ledger schema 9: schema 6's packed layout (routines/ledger/migrate_packed6.py) unpacked
into plain tables.

Schemas 6 to 8 kept runs in `run_log` (the run id in the rowid, interned texts, microsecond
offsets) and claims in `fence`, shown as the plain `runs` and `claims` through views. This
step reads every row back through those views (the one decoder,
routines/ledger/migrate_packed6.py) into
plain tables of the same columns as a ledger that was never packed, then drops the packed
tables, the views and their triggers.

It runs inside the one transaction of `Ledger._migrate`: a process killed anywhere in it
leaves the packed schema whole (SQLite rolls the transaction back at the next open), and the
next open starts it again (tests/routines/ledger/test_ledger_unpack.py kills one mid-way). Runs are
copied in
batches in rowid order so a big ledger says how far it is on stderr; the order keeps history's
tie-break (runs that started at the same microsecond, in the order they were written).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence

from routines.ledger import migrate_packed6

__all__ = ["BATCH", "unpack"]

BATCH = 50_000  # runs copied per statement; a progress line after each when asked

Progress = Callable[[int, int], None]


def _columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in db.execute(f"PRAGMA table_info({table})")]


def unpack(
    db: sqlite3.Connection,
    runs_table: str,
    claims_table: str,
    run_columns: Sequence[str],
    indexes: Sequence[str],
    progress: Progress | None = None,
) -> None:
    """Schema 6-8's packed runs and claims into the plain tables `runs_table` and
    `claims_table` (CREATE TABLE statements for tables named runs_plain and claims_plain, with
    `run_columns` after id), then those renamed to runs and claims and `indexes` made."""
    packed = _columns(db, "run_log")
    # Schema 8 added parent_run_id to run_log; 6 and 7 have none (NULL below).
    later = ("parent_run_id",) if "parent_run_id" in packed else ()
    for statement in migrate_packed6.views(later):  # the decoder, with every column run_log has
        db.execute(statement)
    shown = set(_columns(db, "runs"))
    db.execute(runs_table)
    db.execute(claims_table)
    cols = ", ".join(run_columns)
    picks = ", ".join(c if c in shown else f"NULL AS {c}" for c in run_columns)
    total: int = db.execute("SELECT COUNT(*) FROM run_log").fetchone()[0]
    done, last = 0, -1
    while True:
        upper = db.execute(
            "SELECT MAX(id) FROM (SELECT id FROM run_log WHERE id > ? ORDER BY id LIMIT ?)",
            (last, BATCH),
        ).fetchone()[0]
        if upper is None:
            break
        # A row whose run id was kept as text keeps its small rowid; a packed one takes the
        # next (ids only order runs; rowids below PACKED_MIN come first in id order).
        cur = db.execute(
            f"INSERT INTO runs_plain (id, {cols}) SELECT CASE WHEN id < "
            f"{migrate_packed6.PACKED_MIN} "
            f"THEN id END, {picks} FROM runs WHERE id > ? AND id <= ? ORDER BY id",
            (last, upper),
        )
        done += cur.rowcount
        last = upper
        if progress is not None:
            progress(done, total)
    db.execute(
        "INSERT INTO claims_plain (routine, slot, claimed_at, run_id) "
        "SELECT routine, slot, claimed_at, run_id FROM claims"
    )
    for statement in (
        "DROP VIEW runs",  # its INSTEAD OF triggers go with it
        "DROP VIEW claims",
        "DROP TABLE run_log",
        "DROP TABLE fence",
        "DROP TABLE texts",
        "DROP TABLE routines",
        "ALTER TABLE runs_plain RENAME TO runs",
        "ALTER TABLE claims_plain RENAME TO claims",
        *indexes,
    ):
        db.execute(statement)
