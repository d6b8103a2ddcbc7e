"""The SQLite ledger's connection: opening the file (WAL, the schema brought up to date), the
errors SQLite raises translated once (routines/ledger/faults.py), reopening after a failure
that may pass, and refusing a file that is no longer the one opened. `Ledger` (sqlite.py)
holds the queries on top of it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Self

from routines.ledger import migrate_sqlite
from routines.ledger.faults import (
    damaged,
    keep_wal_on_close,
    mend_sidecars,
    os_reason,
    sqlite_reason,
    unavailable_message,
)
from routines.ledger.model import LedgerError, LedgerUnavailable, Unavailable

__all__ = ["BUSY_TIMEOUT_SEC", "REOPEN_AFTER_SEC", "SqliteConnection"]

BUSY_TIMEOUT_SEC = 10.0

log = logging.getLogger("vinos.ledger")


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


# How soon a ledger that could not be opened (`Ledger(path, wait=True)`) is tried again: the
# daemon's tick retries it, and this keeps a burst of calls within one tick from each trying.
REOPEN_AFTER_SEC = 1.0


class SqliteConnection:
    """One connection to ledger.db. Not shared across threads; open one per process/thread.

    `wait=True` (the daemon's): a ledger that cannot be opened for a reason that may pass
    (`Unavailable`: a full disk, a read-only file, an I/O error, a lock) is not an error
    yet: every use raises LedgerUnavailable, and tries the open again, until one succeeds.
    So a daemon starts on a full disk, says why, answers `status`, and resumes by itself
    (tests/supervisor/test_reliability_storage.py). A use that fails with READ_ONLY or
    IO_ERROR closes the connection, so the next reopens it: SQLite keeps the -shm it opened
    read-only for the connection's life, and restoring the file's mode must be enough.
    """

    def __init__(self, path: Path, *, wait: bool = False) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._why: LedgerUnavailable | None = None
        self._retry_at = 0.0
        self._ident: tuple[int, int] | None = None  # the file first opened (never another)
        self._guard = wait  # the daemon's: every use checks the file is still the one opened
        self._fenced = False  # whether closing leaves -wal and -shm be (`_fence`)
        self._fence_tried = False
        self._closed = False  # by `close`: never reopened
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._os_error(exc) from exc
        try:
            self._open()
        except LedgerUnavailable as exc:
            if not wait:
                raise
            self._why = exc
            self._retry_at = time.monotonic() + REOPEN_AFTER_SEC

    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            if self._closed:
                raise sqlite3.ProgrammingError("Cannot operate on a closed ledger.")
            self._reopen()
        assert self._conn is not None
        if self._guard and self._ident is not None and _file_id(self.path) != self._ident:
            self._fence()
        return self._conn

    def _fence(self) -> None:
        """The file at our path is not the one we opened (replaced by a rename, or deleted
        with a hard link kept): SQLite would find its -wal and -shm by that path, so nothing
        more is read or written through this connection, and closing it leaves them be
        (tests/supervisor/test_reliability_storage.py). Lifted if the very file comes back.
        Where SQLite cannot be told to leave them be (`keep_wal_on_close` False: a Python
        whose sqlite3 module it does not know), the risk is logged once, as an error, before
        anything closes (tests/routines/ledger/test_ledger_faults.py)."""
        if not self._fence_tried:
            self._fence_tried = True
            self._fenced = keep_wal_on_close(self._db_raw(), self.path)
            if not self._fenced:
                log.error(
                    "%s was replaced under this process, and SQLite's checkpoint at close "
                    "could not be turned off on this Python: closing the ledger may write "
                    "this process's write-ahead log into the file now at that path, or "
                    "delete its -wal and -shm. Copy %s-wal aside before stopping the daemon.",
                    self.path,
                    self.path,
                )
        raise LedgerUnavailable(
            Unavailable.REPLACED,
            f"{self.path} is not the ledger this process opened (replaced or deleted): "
            "nothing is read or written through it",
        )

    def _db_raw(self) -> sqlite3.Connection:
        assert self._conn is not None
        return self._conn

    @property
    def opened_id(self) -> tuple[int, int] | None:
        """(st_dev, st_ino) of the file this ledger opened first, None before it opened."""
        return self._ident

    @property
    def unavailable(self) -> LedgerUnavailable | None:
        """Why the ledger is closed now (it is tried again at its next use), or None."""
        return self._why if self._conn is None else None

    def _reopen(self) -> None:
        why = self._why or LedgerUnavailable(Unavailable.IO_ERROR, f"{self.path}: closed")
        if time.monotonic() < self._retry_at:
            raise why
        self._retry_at = time.monotonic() + REOPEN_AFTER_SEC
        if self._ident is not None and _file_id(self.path) != self._ident:
            # Replaced or deleted since: opening the path now would open another file (and
            # share its -wal and -shm by name); the daemon's Ground says so and stops.
            raise LedgerUnavailable(
                Unavailable.REPLACED, f"{self.path}: not the ledger first opened; not reopened"
            )
        try:
            self._open()
        except LedgerUnavailable as exc:
            self._why = exc
            raise
        self._why = None

    def _open(self) -> None:
        path = self.path
        mend_sidecars(path)
        try:
            db = sqlite3.connect(
                path, timeout=BUSY_TIMEOUT_SEC, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise self._unusable(exc) from exc
        self._conn = db
        try:
            db.row_factory = sqlite3.Row
            # Read the version before anything writes (the switch to WAL rewrites the header):
            # a ledger from a newer vinos-routine is refused byte for byte untouched.
            self._refuse_newer(self.version)
            # Takes effect only in a new, empty file (before WAL writes its header); an
            # existing ledger is converted once by the v5 migration's VACUUM.
            if db.execute("PRAGMA page_count").fetchone()[0] == 0:
                db.execute("PRAGMA auto_vacuum=INCREMENTAL")
            self._set_wal()
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA foreign_keys=ON")
            if self._migrate():
                self.enable_incremental_vacuum()
        except BaseException as exc:
            self._conn = None
            db.close()  # a refused ledger keeps no connection (nor -wal/-shm) open
            if isinstance(exc, sqlite3.Error) and sqlite_reason(exc, path.parent) is not None:
                raise self._unusable(exc) from exc
            raise
        if self._ident is None:
            self._ident = _file_id(path)

    @classmethod
    def read_only(cls, path: Path) -> Self:
        """A connection that cannot write (SQLite `mode=ro`): the dashboard's. Nothing is
        created or migrated; a missing ledger, or one of another schema, is a LedgerError."""
        self = cls.__new__(cls)
        self.path = path
        self._why = None
        self._retry_at = 0.0
        self._ident = None
        self._guard = self._fenced = self._fence_tried = self._closed = False
        if not path.is_file():
            raise LedgerError(f"{path}: no ledger yet (it is created when the daemon starts)")
        try:
            self._conn = sqlite3.connect(
                f"{path.resolve().as_uri()}?mode=ro",
                uri=True,
                timeout=BUSY_TIMEOUT_SEC,
                isolation_level=None,
                check_same_thread=False,
            )
            self._conn.row_factory = sqlite3.Row
            version = self.version
        except sqlite3.Error as exc:
            raise self._unusable(exc) from exc
        if version != migrate_sqlite.LEDGER_VERSION:
            self._conn.close()
            self._refuse_newer(version)
            raise LedgerError(
                f"{path}: schema {version}, expected {migrate_sqlite.LEDGER_VERSION}; start the "
                "daemon once to upgrade it"
            )
        return self

    def _set_wal(self) -> None:
        # Switching to WAL needs an exclusive lock, and there SQLite answers "database is
        # locked" at once instead of calling the busy handler (two first opens at once, or a
        # v1 ledger in use): wait for it here, up to the same timeout.
        deadline = time.monotonic() + BUSY_TIMEOUT_SEC
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc) or time.monotonic() >= deadline:
                    raise
                time.sleep(0.005)

    def _refuse_newer(self, version: int) -> None:
        if version > migrate_sqlite.LEDGER_VERSION:
            raise LedgerError(
                f"{self.path}: written by a newer vinos-routine (schema {version}, this one "
                f"knows {migrate_sqlite.LEDGER_VERSION}); upgrade vinos-routine, the ledger was "
                "not touched"
            )

    def _unusable(self, exc: sqlite3.Error) -> LedgerError:
        """The error to raise for an SQLite failure: a LedgerUnavailable naming its reason and
        what to do (`unavailable_message`), or a plain LedgerError for one that is ours."""
        reason = sqlite_reason(exc, self.path.parent)
        if reason is None:
            return LedgerError(f"{self.path}: {exc}")
        if reason is Unavailable.CORRUPT and not damaged(self.path):
            reason = Unavailable.IO_ERROR  # SQLite said so, but the file checks out whole
        return LedgerUnavailable(reason, unavailable_message(self.path, reason, str(exc)))

    def _os_error(self, exc: OSError) -> LedgerUnavailable:
        reason = os_reason(exc)
        return LedgerUnavailable(reason, unavailable_message(self.path, reason, str(exc)))

    def close(self) -> None:
        self._closed = True
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """SQLite's errors on this connection as LedgerUnavailable (or LedgerError). After a
        READ_ONLY, IO_ERROR or UNEXPECTED error the connection is closed: the next use opens
        it again."""
        try:
            yield
        except sqlite3.Error as exc:
            mapped = self._unusable(exc)
            if not isinstance(mapped, LedgerUnavailable):
                raise  # a constraint or a misuse: a bug of ours, with its own traceback
            if mapped.reason in _REOPEN:
                self._why = mapped
                self._retry_at = 0.0
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
            raise mapped from exc

    def reader(self) -> sqlite3.Connection:
        """The connection, to read with (routines/proposals.py's `ProposalStore`); every
        write goes through `transaction`."""
        with self._errors():
            return self._db

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE … COMMIT: the write lock is taken up front (no upgrade deadlocks).
        Anything SQLite refuses (a full disk, a read-only file, a lock held past the busy
        timeout) is a LedgerUnavailable: nothing of the transaction was recorded."""
        with self._errors():
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:  # SQLITE_FULL may have rolled it back already
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                raise

    # -- schema -------------------------------------------------------------------------

    @property
    def version(self) -> int:
        version: int = self._db.execute("PRAGMA user_version").fetchone()[0]
        return version

    def _migrate(self) -> bool:
        """Bring the schema to LEDGER_VERSION (routines/ledger/migrate_sqlite.py, read there so
        a test can move it); True if it was older."""
        if self.version == migrate_sqlite.LEDGER_VERSION:
            # Current already: no write, so opening the ledger to read (list, waybar) does not
            # make every other connection see a change (PRAGMA data_version).
            return False
        with self.transaction() as db:
            version = self.version
            self._refuse_newer(version)  # again: another process may have upgraded it since
            migrate_sqlite.upgrade(db, self.path, version)
        return True

    def enable_incremental_vacuum(self) -> bool:
        """Convert a ledger made before v5 to auto_vacuum = INCREMENTAL; True once it is.

        That takes one VACUUM: the whole file is rewritten, once, at the first open after the
        upgrade (10 s for a 743 MB year of minutely runs in bench_ledger_year.py), with as
        much free disk again while it runs and other writers waiting.
        A ledger busy at that moment stays as it is; the daemon's housekeeping tries again.
        """
        if self._db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2:
            return True
        try:
            self._db.execute("PRAGMA auto_vacuum=INCREMENTAL")
            self._db.execute("VACUUM")
        except sqlite3.OperationalError:
            return False  # busy, or no room for the copy: the file works as it is
        return True


# After these the connection is opened again at its next use (see `Ledger._errors`).
_REOPEN = {Unavailable.READ_ONLY, Unavailable.IO_ERROR, Unavailable.UNEXPECTED}


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino
