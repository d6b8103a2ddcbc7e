"""The ledger: one SQLite file (WAL) that is the single source of truth for every run.

Tables:
- runs: one row per run, including skipped, missed, budget and interrupted ones (zero cost).
  Columns grow by migration; rows written by older versions keep NULL in newer columns.
- claims: the run fence. (routine, slot) is UNIQUE: a slot is claimed once, ever.
- routine_state: per routine, the enabled override, the failure streak, the schedule cursor.
- run_days: the compacted history (routines/ledger/rundays.py); proposals (routines/proposals.py)
  and a paused run's conversation (routines/ledger/sqlrequests.py).
The schema and its steps are routines/ledger/migrate_sqlite.py's; the connection, its
errors and reopening are routines/ledger/sqlite_open.py's; the queries and the contract's
rules are routines/ledger/sqlstore.py's `SqlLedger`, the same as PostgreSQL's.

The tables are plain, the same as PostgreSQL's (routines/ledger/migrate_postgres.py): times
are the ISO text `iso` writes (UTC, microseconds, so they sort as text), `sqlite3 ledger.db
'SELECT * FROM runs'` reads them as they are.

Invariant: routine_state's last_* columns are written in the transaction that finishes a run,
so `list` and `status` read one row per routine and never scan runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from routines.ledger.migrate_sqlite import LEDGER_VERSION
from routines.ledger.sql import SQLITE
from routines.ledger.sqlite_open import SqliteConnection
from routines.ledger.sqlstore import SqlLedger

__all__ = ["LEDGER_VERSION", "Ledger"]


class Ledger(SqliteConnection, SqlLedger):
    """One connection to ledger.db (sqlite_open.py: opening, errors, reopening), with the
    fence, the runs, the money, the state and the retention (sqlstore.py). Not shared across
    threads; open one per process/thread."""

    Q = SQLITE

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        with self._errors():
            return self._db.execute(sql, args).fetchall()

    def incremental_vacuum(self, pages: int) -> int:
        """Give up to `pages` free pages back to the file system; how many are still free."""
        # executescript steps the pragma to the end; execute() would free a single page.
        self._db.executescript(f"PRAGMA incremental_vacuum({int(pages)});")
        free: int = self._db.execute("PRAGMA freelist_count").fetchone()[0]
        return free

    @property
    def data_version(self) -> int:
        """Changes when another connection commits to the ledger (PRAGMA data_version)."""
        with self._errors():
            version: int = self._db.execute("PRAGMA data_version").fetchone()[0]
        return version
