"""The ledger: one SQLite file (WAL) that is the single source of truth for every run.

Tables:
- runs: one row per run, including skipped, missed, budget and interrupted ones (zero cost).
  Columns grow by migration; rows written by older versions keep NULL in newer columns.
- claims: the run fence. (routine, slot) is UNIQUE: a slot is claimed once, ever.
- routine_state: per routine, the enabled override, the failure streak, the schedule cursor.

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

The tables are plain, the same as PostgreSQL's (routines/ledger/migrate_postgres.py): times
are the ISO text `iso` writes (UTC, microseconds, so they sort as text), `sqlite3 ledger.db
'SELECT * FROM runs'` reads them as they are.

Invariant: routine_state's last_* columns are written in the transaction that finishes a run,
so `list` and `status` read one row per routine and never scan runs.
Invariant: a compacted run is deleted in the transaction that adds it to its day's row
(`Ledger.compact`; tests/test_ledger_compaction.py kills a compacting process to check).

Invariant: a claim, its run row and the routine's cursor move in one transaction
(see `Ledger.claim` and tests/test_ledger_fence.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from routines.ledger import migrate_unpack, rundays, shared
from routines.ledger.faults import (
    LedgerError,
    LedgerUnavailable,
    Unavailable,
    damaged,
    keep_wal_on_close,
    mend_sidecars,
    os_reason,
    sqlite_reason,
    unavailable_message,
)
from routines.ledger.rundays import DaySummary
from routines.ledger.shared import Row, from_iso, iso
from routines.ledger.sql import CLAIM_ROUTINES, RUN_ROUTINES
from routines.ledger.sql import SQLITE as Q
from routines.runs import (
    ACTIVE,
    NO_LAST_RUN,
    Outcome,
    RunEnd,
    RunStatus,
    Trigger,
    sql_in,
    status_of,
)

__all__ = [
    "ANY",
    "LEDGER_VERSION",
    "ActiveRun",
    "DaySummary",
    "LastRun",
    "Ledger",
    "LedgerError",
    "LedgerUnavailable",
    "RoutineState",
    "RunRow",
    "Unavailable",
    "from_iso",
    "is_enabled",
    "iso",
    "last_run_row",
    "run_row",
    "state_row",
]

LEDGER_VERSION = 9
BUSY_TIMEOUT_SEC = 10.0
CLAIM_RETENTION = timedelta(days=45)
COUNT_LINE_TTL_SEC = 60.0
SLOW_UPGRADE_ROWS = 50_000  # a bigger ledger's upgrade says so first (it takes a while)

_V1 = """
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
_STEPS: dict[int, tuple[tuple[str, ...], tuple[str, ...]]] = {
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
}
_PACKED = range(6, 9)  # the schemas whose runs and claims were views over packed tables

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
)

# runs' columns after id, in the order the steps added them (a plain ledger's, and what
# schema 9 unpacks a packed one into).
_PLAIN_COLUMNS = tuple(
    line.split()[0]
    for line in _V1.strip().splitlines()[2:-1]  # between "id INTEGER PRIMARY KEY," and ")"
) + tuple(c.split()[0] for n in sorted(_STEPS) for c in _STEPS[n][0])


def _runs_table(name: str) -> str:
    """CREATE TABLE of a plain runs table called `name`, as steps 1 to 8 leave it."""
    types = [line.strip().rstrip(",") for line in _V1.strip().splitlines()[2:-1]]
    types += [c for n in sorted(_STEPS) for c in _STEPS[n][0]]
    return f"CREATE TABLE {name} (id INTEGER PRIMARY KEY, {', '.join(types)})"


class _Any:
    """The type of ANY: "whatever the cursor is" for `Ledger.claim(expect_cursor=...)`."""


ANY = _Any()


class _Stale(Exception):
    pass


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

    def enabled(self, file_enabled: bool) -> bool:
        """Whether the routine is on: the latest of `enable`/`disable` and the file's value.

        `enable`/`disable` (and auto-disable) store an override together with the file's
        `enabled` at that moment; editing the file's `enabled` afterwards is the newer action,
        so the override applies only while the file still says what it said then.
        """
        if self.enabled_override is None or self.file_enabled_seen != file_enabled:
            return file_enabled
        return self.enabled_override


def is_enabled(states: Mapping[str, RoutineState], name: str, file_enabled: bool) -> bool:
    """Whether routine `name` is on, from the states read in one query (`Ledger.states`)."""
    state = states.get(name)
    return state.enabled(file_enabled) if state is not None else file_enabled


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


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


# How soon a ledger that could not be opened (`Ledger(path, wait=True)`) is tried again: the
# daemon's tick retries it, and this keeps a burst of calls within one tick from each trying.
REOPEN_AFTER_SEC = 1.0


class Ledger:
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
        self._caches()
        self._conn: sqlite3.Connection | None = None
        self._why: LedgerUnavailable | None = None
        self._retry_at = 0.0
        self._ident: tuple[int, int] | None = None  # the file first opened (never another)
        self._guard = wait  # the daemon's: every use checks the file is still the one opened
        self._fenced = False
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
        (tests/supervisor/test_reliability_storage.py). Lifted if the very file comes back."""
        if not self._fenced:
            self._fenced = keep_wal_on_close(self._db_raw(), self.path)
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
    def read_only(cls, path: Path) -> Ledger:
        """A connection that cannot write (SQLite `mode=ro`): the dashboard's. Nothing is
        created or migrated; a missing ledger, or one of another schema, is a LedgerError."""
        self = cls.__new__(cls)
        self.path = path
        self._caches()
        self._why = None
        self._retry_at = 0.0
        self._ident = None
        self._guard = self._fenced = self._closed = False
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
        if version != LEDGER_VERSION:
            self._conn.close()
            self._refuse_newer(version)
            raise LedgerError(
                f"{path}: schema {version}, expected {LEDGER_VERSION}; start the daemon once "
                "to upgrade it"
            )
        return self

    def _caches(self) -> None:
        self._noisy = False  # this upgrade says how far it is (a big ledger)
        self._count_lines: dict[str, str] = {}
        self._count_lines_at = float("-inf")
        self._count_max: int | None = None

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
        if version > LEDGER_VERSION:
            raise LedgerError(
                f"{self.path}: written by a newer vinos-routine (schema {version}, this one "
                f"knows {LEDGER_VERSION}); upgrade vinos-routine, the ledger was not touched"
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

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """SQLite's errors on this connection as LedgerUnavailable (or LedgerError). After a
        READ_ONLY or IO_ERROR the connection is closed: the next use opens it again."""
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
        """Bring the schema to LEDGER_VERSION; True if it was older."""
        if self.version == LEDGER_VERSION:
            # Current already: no write, so opening the ledger to read (list, waybar) does not
            # make every other connection see a change (PRAGMA data_version).
            return False
        with self.transaction() as db:
            version = self.version
            self._refuse_newer(version)  # again: another process may have upgraded it since
            if version == 0:
                has_runs = db.execute(
                    "SELECT 1 FROM sqlite_master WHERE type='table' AND name='runs'"
                ).fetchone()
                if has_runs:
                    # v2.0.4 shipped without user_version: a runs table means schema 1.
                    version = 1
                else:
                    db.execute(_V1)
                    version = 1
            self._note_slow_upgrade(db, version)
            packed = version in _PACKED
            for step in range(version + 1, LEDGER_VERSION + 1):
                if packed and step == 8:
                    continue  # the unpacking (9) makes runs with parent_run_id and its index
                if packed and step == 9:
                    self._unpack(db)
                    continue
                columns, statements = _STEPS[step]
                for column in columns:
                    db.execute(f"ALTER TABLE runs ADD COLUMN {column}")
                for statement in statements:
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {LEDGER_VERSION}")
        return True

    def _slow(self, db: sqlite3.Connection, version: int) -> bool:
        """Whether the upgrade from `version` is of a ledger big enough to say so."""
        if version >= LEDGER_VERSION or version < 4:
            return False
        # Packed rowids are seconds << 24, not a count: count those rows (once, here).
        count = "COUNT(*) FROM run_log" if version in _PACKED else "MAX(rowid) FROM runs"
        rows: int = db.execute(f"SELECT {count}").fetchone()[0] or 0
        return rows > SLOW_UPGRADE_ROWS

    def _note_slow_upgrade(self, db: sqlite3.Connection, version: int) -> None:
        """Say on stderr that a big ledger is being converted (a year of minutely runs takes
        tens of seconds), so a command that seems stuck is not killed half-way; a kill is
        harmless anyway (one transaction), it only starts over."""
        self._noisy = self._slow(db, version)
        if self._noisy:
            print(
                f"{self.path}: upgrading the ledger from schema {version} to {LEDGER_VERSION}, "
                "once; this takes a while",
                file=sys.stderr,
                flush=True,
            )

    def _unpack(self, db: sqlite3.Connection) -> None:
        """Step 9 on a packed ledger (routines/ledger/migrate_unpack.py), saying how far it is."""

        def progress(done: int, total: int) -> None:
            print(f"{self.path}: {done:,} of {total:,} runs unpacked", file=sys.stderr, flush=True)

        migrate_unpack.unpack(
            db,
            _runs_table("runs_plain"),
            _CLAIMS.replace("TABLE claims", "TABLE claims_plain"),
            _PLAIN_COLUMNS,
            (*_RUN_INDEXES, _PARENT_INDEX),
            progress if self._noisy else None,
        )

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

    # -- the run fence --------------------------------------------------------------------

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
    ) -> bool:
        """Claim (routine, slot) and record its run row and cursor, all or nothing.

        Returns False, changing nothing, when the slot was claimed before (by anyone, ever),
        or when `expect_cursor` is given and the routine's cursor is no longer that value
        (another process acted since the caller planned: plan again).
        `status` is the row's first status: queued/running for a run that will start,
        skipped/missed for a slot recorded without running.
        """
        try:
            with self.transaction() as db:
                if expect_cursor is not ANY:
                    row = db.execute(Q.cursor(), (routine,)).fetchone()
                    if (row["cursor"] if row else None) != expect_cursor:
                        raise _Stale
                cur = db.execute(_INSERT_CLAIM_SQL, (routine, slot, iso(now), run_id))
                if cur.rowcount == 0:
                    raise _Stale  # claimed before
                self._advance_cursor(db, routine, slot)
                # Any other constraint (a reused run_id) is the caller's bug, not a lost race:
                # it raises rather than reading as "claimed before".
                self._insert_run(db, routine, run_id, slot, trigger, status, now, detail, owner)
        except _Stale:
            return False
        return True

    def _advance_cursor(self, db: sqlite3.Connection, routine: str, slot: str) -> None:
        db.execute(_ADVANCE_CURSOR_SQL, (routine, slot))

    def advance_cursor(self, routine: str, slot: str) -> None:
        with self.transaction() as db:
            self._advance_cursor(db, routine, slot)

    def _insert_run(
        self,
        db: sqlite3.Connection,
        routine: str,
        run_id: str,
        slot: str | None,
        trigger: Trigger,
        status: RunStatus,
        now: datetime,
        detail: str,
        owner: tuple[int, float] | None,
        parent_run_id: str | None = None,
    ) -> None:
        values = shared.new_run(
            run_id=run_id,
            routine=routine,
            slot=slot,
            trigger=trigger,
            status=status,
            started=iso(now),
            detail=detail,
            owner=owner,
            parent_run_id=parent_run_id,
        )
        db.execute(shared.insert_run_sql(tuple(values), "?"), tuple(values.values()))
        if status not in ACTIVE:
            _note_last(db, routine, run_id, status, None, iso(now), iso(now))

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
    ) -> None:
        """A run row without a claim: manual runs and replies (`parent_run_id`: the run a
        reply continues), and refusals recorded for the history."""
        with self.transaction() as db:
            self._insert_run(
                db, routine, run_id, slot, trigger, status, now, detail, owner, parent_run_id
            )

    def prune_claims(self, now: datetime, keep_max: int | None = None) -> int:
        """Forget claims older than 45 days, and each routine's beyond its newest `keep_max`
        (the cursor keeps old slots from coming back: README "Files")."""
        with self.transaction() as db:
            cur = db.execute(Q.prune_old_claims(), (iso(now - CLAIM_RETENTION),))
            pruned = cur.rowcount
            if keep_max is not None:
                for name in [r[0] for r in db.execute(CLAIM_ROUTINES)]:
                    cur = db.execute(Q.prune_claims_beyond(), (name, name, keep_max - 1))
                    pruned += cur.rowcount
            return pruned

    def is_claimed(self, routine: str, slot: str) -> bool:
        row = self._db.execute(Q.is_claimed(), (routine, slot)).fetchone()
        return row is not None

    # -- run rows -----------------------------------------------------------------------

    def start_run(self, run_id: str, *, now: datetime, worker_pid: int | None) -> None:
        with self.transaction() as db:
            db.execute(Q.start_run(), (RunStatus.RUNNING, iso(now), worker_pid, run_id))

    def finish_run(self, run_id: str, end: RunEnd, *, now: datetime) -> bool:
        """Write a run's final columns and finished_at; True if it did.

        Invariant: only an active (queued/running) row changes, so a run ends with exactly
        one final status: a second ending (an error path after `ok` was written, a daemon
        marking a run interrupted that just finished) changes nothing and returns False
        (tests/test_ledger.py::test_finish_run_changes_only_an_active_run).
        KeyError when there is no such run.
        """
        with self.transaction() as db:
            row = db.execute(Q.run_to_finish(), (run_id,)).fetchone()
            if row is None:
                raise KeyError(run_id)
            if row["status"] not in ACTIVE:
                return False
            duration = end.duration_sec
            if duration is None and row["started_at"]:
                duration = max(0.0, (now - from_iso(row["started_at"])).total_seconds())
            db.execute(Q.finish_run(), (*shared.finish_values(end, iso(now), duration), run_id))
            if end.status not in ACTIVE and row["started_at"]:
                _note_last(
                    db, row["routine"], run_id, end.status, end.outcome, row["started_at"], iso(now)
                )
        return True

    def active_runs(self) -> list[ActiveRun]:
        with self._errors():
            rows = self._db.execute(Q.active_runs()).fetchall()
        return [ActiveRun(**{**dict(r), "status": RunStatus(r["status"])}) for r in rows]

    def run(self, run_id: str) -> RunRow | None:
        row = self._db.execute(Q.run(), (run_id,)).fetchone()
        return _row(row) if row else None

    def history(self, routine: str | None = None, limit: int = 20) -> list[RunRow]:
        """Runs newest first (all routines when `routine` is None)."""
        args = (routine,) if routine else ()
        rows = self._db.execute(Q.history(bool(routine)), (*args, limit)).fetchall()
        return [_row(r) for r in rows]

    def replies_to(self, run_ids: Sequence[str]) -> list[RunRow]:
        """The reply runs whose parent is one of `run_ids`, oldest first."""
        if not run_ids:
            return []
        rows = self._db.execute(Q.replies_to(len(run_ids)), tuple(run_ids)).fetchall()
        return [_row(r) for r in rows]

    def thread(self, run_id: str) -> list[RunRow]:
        """The conversation `run_id` belongs to: its first run, then every reply below it
        (depth first, oldest first); [] when the run is unknown."""
        row = self.run(run_id)
        seen: set[str] = set()
        while row is not None and row.parent_run_id and row.run_id not in seen:
            seen.add(row.run_id or "")
            parent = self.run(row.parent_run_id)
            if parent is None:
                break
            row = parent
        if row is None:
            return []
        out: list[RunRow] = []

        def below(r: RunRow) -> None:
            out.append(r)
            if r.run_id and len(out) < 1000:  # a cycle cannot be made, but never loop
                for child in self.replies_to([r.run_id]):
                    if child.run_id not in {o.run_id for o in out}:
                        below(child)

        below(row)
        return out

    def runs_between(self, start: datetime, end: datetime) -> list[RunRow]:
        """Runs of every routine that started in [start, end), newest first."""
        rows = self._db.execute(Q.runs_between(), (iso(start), iso(end))).fetchall()
        return [_row(r) for r in rows]

    def last_started_here(self, routine: str) -> str | None:
        """When `routine`'s newest finished run started (every run of this file's is here)."""
        row = self._db.execute(
            "SELECT last_started FROM routine_state WHERE routine = ?", (routine,)
        ).fetchone()
        return row[0] if row else None

    def last_runs(self) -> dict[str, LastRun]:
        """Each routine's newest finished run (not queued/running/skipped), from
        routine_state: one row per routine, however long the history."""
        rows = self._db.execute(
            "SELECT routine, last_run_id, last_status, last_outcome, last_started, "
            "last_finished FROM routine_state WHERE last_status IS NOT NULL"
        ).fetchall()
        return {r["routine"]: last_run_row(r) for r in rows}

    # -- compaction (routines/ledger/rundays.py) ---------------------------------------------

    def compact(
        self, before: datetime, zone: ZoneInfo, limit: int = 500, keep_max: int | None = None
    ) -> int:
        """Fold up to `limit` finished runs into their day rows (days in `zone`) and delete
        them, in one transaction; the number folded (0: done). A run is folded when it started
        before `before`, or before the day of its routine's `keep_max`-th newest run
        (`rundays.count_line`). When a catch-up is done, texts no row uses are dropped."""
        with self.transaction() as db:
            rows: list[sqlite3.Row] = []
            for name, line in self._lines(db, before, zone, keep_max):
                if len(rows) >= limit:
                    break
                rows += db.execute(Q.to_fold(), (name, line, limit - len(rows))).fetchall()
            for f in rundays.fold([shared.fold_row(r) for r in rows], zone):
                db.execute(_ADD_DAY_SQL, shared.add_day_args(f, zone.key))
            db.executemany(Q.delete_runs(1), [(r["id"],) for r in rows])
        return len(rows)

    def _lines(
        self, db: sqlite3.Connection, before: datetime, zone: ZoneInfo, keep_max: int | None
    ) -> list[tuple[str, str]]:
        """(routine, the started_at its runs are folded before) for each routine."""
        line = iso(before)
        now = time.monotonic()
        names = [r[0] for r in db.execute(RUN_ROUTINES)]
        if keep_max is None:
            return [(name, line) for name in names]
        if now - self._count_lines_at > COUNT_LINE_TTL_SEC or keep_max != self._count_max:
            # Walking keep_max index entries per routine: cached for a while, as a line
            # computed earlier is only ever older (it folds less, never too much).
            self._count_lines, self._count_lines_at, self._count_max = {}, now, keep_max
            for name in names:
                nth = db.execute(Q.nth_newest_start(), (name, keep_max - 1)).fetchone()
                if nth is not None:
                    self._count_lines[name] = iso(rundays.count_line(from_iso(nth[0]), zone))
        return [(name, max(line, self._count_lines.get(name, line))) for name in names]

    def incremental_vacuum(self, pages: int) -> int:
        """Give up to `pages` free pages back to the file system; how many are still free."""
        # executescript steps the pragma to the end; execute() would free a single page.
        self._db.executescript(f"PRAGMA incremental_vacuum({int(pages)});")
        free: int = self._db.execute("PRAGMA freelist_count").fetchone()[0]
        return free

    def days(self, routine: str | None = None, limit: int = 20) -> list[DaySummary]:
        """Compacted days, newest first (all routines when `routine` is None)."""
        args = (routine,) if routine else ()
        rows = self._db.execute(Q.days(bool(routine)), (*args, limit)).fetchall()
        return [rundays.summary(r) for r in rows]

    def oldest_run_start(self) -> str | None:
        """started_at of the oldest run row still whole (an index lookup)."""
        row = self._db.execute("SELECT MIN(started_at) FROM runs").fetchone()
        return row[0] if row else None

    # -- money ------------------------------------------------------------------------------

    def spent_on_day(self, routine: str, day: date, zone: ZoneInfo) -> float:
        """Dollars a routine spent on `day`, a calendar day in `zone` (its own zone)."""
        start, end = day_bounds(day, zone)
        with self._errors():
            row = self._db.execute(Q.spent(), (routine, iso(start), iso(end))).fetchone()
        return float(row[0])

    def spent_today(self, routine: str, zone: ZoneInfo, now: datetime) -> float:
        return self.spent_on_day(routine, now.astimezone(zone).date(), zone)

    def totals(self, start: datetime, end: datetime) -> list[dict[str, Any]]:
        """Per routine between two instants: runs, tokens and dollars, biggest spender first.

        Compacted days count when they start in [start, end): exact for days in the zone
        they were compacted in (the machine's), whatever the compaction line.
        """
        bounds = (iso(start), iso(end))
        runs = self._db.execute(Q.run_totals(), bounds).fetchall()
        days = self._db.execute(Q.day_totals(), bounds).fetchall()
        return shared.merge_totals([*runs, *days])

    def dollars_by_day(self, days: Sequence[date], zone: ZoneInfo) -> dict[date, float]:
        """Total dollars per calendar day in `zone`, for each day asked (compacted or not)."""
        out: dict[date, float] = {}
        for day in days:
            start, end = day_bounds(day, zone)
            bounds = (iso(start), iso(end))
            row = self._db.execute(Q.dollars_on(), (*bounds, *bounds)).fetchone()
            out[day] = int(row[0]) / 1e9
        return out

    # -- per-routine state ------------------------------------------------------------------

    def state(self, routine: str) -> RoutineState:
        with self._errors():
            row = self._db.execute(Q.state(), (routine,)).fetchone()
        return state_row(row) if row is not None else RoutineState(routine)

    def states(self) -> dict[str, RoutineState]:
        """Every routine's state, in one query (the daemon re-reads them after each run)."""
        with self._errors():
            rows = self._db.execute("SELECT * FROM routine_state").fetchall()
        return {r["routine"]: state_row(r) for r in rows}

    @property
    def data_version(self) -> int:
        """Changes when another connection commits to the ledger (PRAGMA data_version)."""
        with self._errors():
            version: int = self._db.execute("PRAGMA data_version").fetchone()[0]
        return version

    def _set_state(self, db: sqlite3.Connection, routine: str, values: dict[str, object]) -> None:
        """Set columns of routine_state (creating the row); booleans stored as 0/1."""
        db.execute(
            shared.set_state_sql(tuple(values), "?", "?"),
            (routine, *shared.state_params(values), iso(datetime.now(UTC))),
        )

    def enable(self, routine: str, *, file_enabled: bool, cursor: str, fingerprint: str) -> None:
        """The one rule for turning a routine on (`enable`, the dashboard, the daemon's control
        command): the override is stored with the file's `enabled` at this moment (see
        RoutineState.enabled), the failure streak is cleared, and it owes nothing from before:
        the cursor moves to `cursor` (now), never backwards, for the schedule `fingerprint`."""
        with self.transaction() as db:
            row = db.execute(Q.cursor(), (routine,)).fetchone()
            stored = row["cursor"] if row else None
            self._set_state(
                db,
                routine,
                shared.enable_values(
                    stored, file_enabled=file_enabled, cursor=cursor, fingerprint=fingerprint
                ),
            )

    def disable(
        self,
        routine: str,
        *,
        file_enabled: bool,
        reason: str | None = None,
        failure_streak: int | None = None,
    ) -> None:
        """Turn a routine off: by `disable` (no reason), a new draft (streak 0) or three
        strikes (`reason`, the streak that reached it). The override is stored with the
        file's `enabled` at this moment, so editing the file's `enabled` later wins."""
        values = shared.disable_values(
            file_enabled=file_enabled, reason=reason, failure_streak=failure_streak
        )
        with self.transaction() as db:
            self._set_state(db, routine, values)

    def set_failure_streak(self, routine: str, streak: int) -> None:
        with self.transaction() as db:
            self._set_state(db, routine, {"failure_streak": streak})

    def set_cursor(self, routine: str, cursor: str | None, fingerprint: str | None = None) -> None:
        """Reset the cursor, anywhere, even back: for a new or edited schedule (it owes nothing
        from before; `fingerprint` is the new schedule's), or a clock that was wrong."""
        values = shared.cursor_values(cursor, fingerprint)
        with self.transaction() as db:
            self._set_state(db, routine, values)


@dataclass(frozen=True, slots=True)
class LastRun:
    """A routine's newest finished run, as routine_state keeps it."""

    routine: str
    run_id: str | None
    status: RunStatus | str | None  # str: a v2.0.x exit_status the enum lacks ("error")
    outcome: Outcome | None
    started_at: str | None
    finished_at: str | None


def _note_last(
    db: sqlite3.Connection,
    routine: str,
    run_id: str,
    status: RunStatus,
    outcome: Outcome | None,
    started: str,
    finished: str,
) -> None:
    """Make this run the routine's last run unless a newer one is there already."""
    if status in NO_LAST_RUN:
        return
    db.execute(_NOTE_LAST_SQL, (routine, run_id, status, outcome, started, finished))


_NOTE_LAST_SQL = shared.note_last_sql("?")
_ADVANCE_CURSOR_SQL = shared.advance_cursor_sql("?")


_ADD_DAY_SQL = Q.add_day()
_INSERT_CLAIM_SQL = Q.insert_claim(("routine", "slot", "claimed_at", "run_id"))


def _row(row: sqlite3.Row) -> RunRow:
    return run_row(dict(row))


def day_bounds(day: date, zone: ZoneInfo) -> tuple[datetime, datetime]:
    """The UTC instants where a calendar day in `zone` starts and ends (DST-aware)."""
    start = datetime(day.year, day.month, day.day, tzinfo=zone)
    nxt = day + timedelta(days=1)
    end = datetime(nxt.year, nxt.month, nxt.day, tzinfo=zone)
    return start.astimezone(UTC), end.astimezone(UTC)


# After these the connection is opened again at its next use (see `Ledger._errors`).
_REOPEN = {Unavailable.READ_ONLY, Unavailable.IO_ERROR}


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino
