"""The fleet ledger's connection to PostgreSQL (psycopg 3): connecting lazily, migrating
(routines/ledger/migrate_postgres.py), one transaction at a time, and the errors translated
once. `PgLedger` (postgres.py) holds the queries on top of it.

Errors (routines/ledger/faults.py): a lost or refused connection is `LedgerUnavailable` with
reason UNREACHABLE, PostgreSQL's DiskFull one with reason DISK_FULL (nothing of that call
recorded, try again later); while one is recent, calls fail at once without waiting on the network
(`Gate`), so an outage costs the daemon's loop one bounded wait per back-off step.

A client-side deadline (`deadline`, the daemon's connections): the server's statement_timeout
is enforced by the server, so a server that stops answering (SIGSTOP, a hung host, a network
that drops packets) would hold the caller for ever. With a deadline, connecting happens in a
thread of its own (the caller waits at most the deadline for it, and a later call picks the
connection up), and a statement that has not answered when the deadline passes has its
socket shut from a timer thread: the call fails at once as `LedgerUnavailable` (UNREACHABLE), the
connection is dropped, and the gate makes the calls after it fail without waiting. Not
`conn.cancel()`: a cancel is a request the hung server would have to answer. So a hung
database is an outage like a refused one, and the daemon's loop (which makes these calls)
answers its control socket within a second (tests/fleet/test_fleet_fence.py).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Self

import psycopg
from psycopg.rows import dict_row

from routines.ledger.migrate_postgres import MIGRATION_LOCK, PG_LEDGER_VERSION, STEPS
from routines.ledger.model import LedgerError, LedgerUnavailable, Unavailable
from routines.safetext import redact_url

__all__ = ["Cursor", "Gate", "PgConnection", "backoff", "unreachable"]

CONNECT_TIMEOUT_SEC = 3
STATEMENT_TIMEOUT_MS = 10_000
# TCP keepalives (a remote server; a Unix socket ignores them): a connection whose peer
# vanished is found dead in about 10 s, even while idle.
KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
}


def unreachable(message: str) -> LedgerUnavailable:
    """The fleet's database refused, dropped or never answered: nothing of the call recorded.
    The daemon handles it as any LedgerUnavailable: claim nothing, keep finished runs in
    memory, write them when the ledger takes writes again."""
    return LedgerUnavailable(Unavailable.UNREACHABLE, message)


class Gate:
    """Back-off after a failure: calls fail at once until the next attempt is due.

    Delays double from 1 s up to `cap` (the daemon's tick, so the database's return is seen
    within one tick)."""

    def __init__(self, cap: float = 30.0, clock: Any = time.monotonic) -> None:
        self.cap = cap
        self.failures = 0
        self.retry_at = 0.0
        self.clock = clock

    def open(self) -> bool:
        return self.failures == 0 or self.clock() >= self.retry_at

    def failed(self) -> None:
        self.failures += 1
        self.retry_at = self.clock() + backoff(self.failures, self.cap)

    def succeeded(self) -> None:
        self.failures = 0


def backoff(failures: int, cap: float) -> float:
    """Seconds to wait after `failures` failures in a row: 1, 2, 4, … up to `cap`."""
    if failures <= 0:
        return 0.0
    return float(min(cap, 2.0 ** min(failures - 1, 30)))


Cursor = psycopg.Cursor[dict[str, Any]]


class PgConnection:
    """One connection to the fleet's database, for one thread (the daemon's loop, or a CLI).

    The connection opens lazily and reopens after a failure (through `gate`), so a daemon
    starts, and keeps its control socket, while PostgreSQL is down."""

    def __init__(
        self,
        dsn: str,
        *,
        gate: Gate | None = None,
        connect: bool = True,
        deadline: float | None = None,
    ) -> None:
        self.dsn = dsn
        self.gate = gate or Gate()
        self.deadline = deadline  # client-side, seconds: see the module's docstring
        self.where = redact_url(dsn) if "://" in dsn else "the fleet database"
        self._conn: psycopg.Connection[dict[str, Any]] | None = None
        self._lock = threading.Lock()
        self._connecting: threading.Thread | None = None
        self._connected: psycopg.Connection[dict[str, Any]] | None = None
        self._connect_error: LedgerError | None = None
        if connect:
            self._connection()

    # -- connection ---------------------------------------------------------------------

    def _connection(self) -> psycopg.Connection[dict[str, Any]]:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        if self.deadline is not None:
            return self._connection_within(self.deadline)
        if not self.gate.open():
            raise unreachable(f"{self.where}: unreachable (retrying with back-off)")
        try:
            conn = self._open()
        except LedgerUnavailable:
            self.gate.failed()
            raise
        self.gate.succeeded()
        self._conn = conn
        return conn

    def _open(self) -> psycopg.Connection[dict[str, Any]]:
        """A new, migrated connection; LedgerUnavailable (UNREACHABLE), or LedgerError (a
        newer schema)."""
        try:
            conn = psycopg.connect(
                psycopg.conninfo.make_conninfo(self.dsn, **KEEPALIVES),
                autocommit=True,
                row_factory=dict_row,
                connect_timeout=CONNECT_TIMEOUT_SEC,
                # Bounded waits on a server that answers: a statement or a lock.
                options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS} "
                f"-c lock_timeout={STATEMENT_TIMEOUT_MS}",
            )
        except psycopg.OperationalError as exc:
            raise unreachable(f"{self.where}: cannot connect ({_first_line(exc)})") from exc
        try:
            self._migrate(conn)
        except psycopg.OperationalError as exc:
            conn.close()
            raise unreachable(f"{self.where}: connection lost ({_first_line(exc)})") from exc
        except BaseException:
            conn.close()
            raise
        return conn

    def _connection_within(self, deadline: float) -> psycopg.Connection[dict[str, Any]]:
        """Connect in a thread, waiting at most `deadline` (the connection a timed-out
        attempt makes later is the next call's); fail at once while one is under way."""
        if self._connected is not None:
            conn, self._connected = self._connected, None
            self.gate.succeeded()
            self._conn = conn
            return conn
        late = self._take_error()  # of an attempt that ran past its deadline
        if late is not None:
            raise late
        if self._connecting is not None and self._connecting.is_alive():
            raise unreachable(
                f"{self.where}: not answering (still connecting after {deadline:g} s)"
            )
        if not self.gate.open():
            raise unreachable(f"{self.where}: unreachable (retrying with back-off)")

        def attempt() -> None:
            try:
                self._connected = self._open()
            except LedgerError as exc:
                self._connect_error = exc

        self._connecting = threading.Thread(target=attempt, name="pg-connect", daemon=True)
        self._connecting.start()
        self._connecting.join(deadline)
        if self._connecting.is_alive():
            self.gate.failed()
            raise unreachable(f"{self.where}: not answering (no connection within {deadline:g} s)")
        self._connecting = None
        failed = self._take_error()
        if failed is not None:
            if isinstance(failed, LedgerUnavailable):
                self.gate.failed()
            raise failed
        return self._connection_within(deadline)

    def _take_error(self) -> LedgerError | None:
        error, self._connect_error = self._connect_error, None
        return error

    def _broken(self, exc: psycopg.Error, why: str = "") -> LedgerUnavailable:
        if self._conn is not None:
            self._conn.close()
        self._conn = None
        self.gate.failed()
        why = why or f"connection lost ({_first_line(exc)})"
        raise unreachable(f"{self.where}: {why}") from exc

    @contextmanager
    def transaction(self) -> Iterator[Cursor]:
        """One transaction on a cursor; a lost connection is LedgerUnavailable (UNREACHABLE), and
        so is a server that did not answer within the client-side deadline; a server out of
        disk space is LedgerUnavailable (DISK_FULL): never a run's failure."""
        with self._lock:
            conn = self._connection()
            cut = threading.Event()
            timer = None
            if self.deadline is not None:
                timer = threading.Timer(self.deadline, _shut, (conn, cut))
                timer.daemon = True
                timer.start()
            try:
                with conn.transaction(), conn.cursor() as cur:
                    yield cur
            except psycopg.errors.DiskFull as exc:
                raise LedgerUnavailable(
                    Unavailable.DISK_FULL,
                    f"{self.where}: the database server has no space left ({_first_line(exc)}); "
                    "free some on its disk",
                ) from exc
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                if cut.is_set():
                    self._broken(exc, f"not answering (no answer within {self.deadline:g} s)")
                if conn.closed or conn.broken or isinstance(exc, psycopg.InterfaceError):
                    self._broken(exc)
                raise LedgerError(f"{self.where}: {_first_line(exc)}") from exc
            finally:
                if timer is not None:
                    timer.cancel()
                if cut.is_set() and self._conn is conn:  # it answered just as time ran out
                    conn.close()
                    self._conn = None

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self.transaction() as cur:
            cur.execute(sql, args)
            return cur.fetchall()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def ping(self) -> bool:
        """True when the database answers now."""
        try:
            self._read("SELECT 1 AS one")
        except LedgerError:
            return False
        return True

    # -- schema -------------------------------------------------------------------------

    @property
    def version(self) -> int:
        rows = self._read("SELECT value FROM ledger_meta WHERE key = 'version'")
        return int(rows[0]["value"]) if rows else 0

    def _migrate(self, conn: psycopg.Connection[dict[str, Any]]) -> None:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            cur.execute("CREATE TABLE IF NOT EXISTS ledger_meta (key TEXT PRIMARY KEY, value TEXT)")
            cur.execute("SELECT value FROM ledger_meta WHERE key = 'version'")
            row = cur.fetchone()
            version = int(row["value"]) if row else 0
            if version > PG_LEDGER_VERSION:
                raise LedgerError(
                    f"{self.where}: written by a newer vinos-routine (schema {version}, this "
                    f"one knows {PG_LEDGER_VERSION}); upgrade vinos-routine on this machine"
                )
            for step in range(version + 1, PG_LEDGER_VERSION + 1):
                for statement in STEPS[step]:
                    cur.execute(statement)
            if version != PG_LEDGER_VERSION:
                cur.execute(
                    "INSERT INTO ledger_meta (key, value) VALUES ('version', %s) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (str(PG_LEDGER_VERSION),),
                )


def _shut(conn: psycopg.Connection[Any], cut: threading.Event) -> None:
    """The client-side deadline passed: shut the connection's socket under the statement
    waiting on it, which then fails at once (a copy of the descriptor, so psycopg's own
    stays valid until it closes the connection)."""
    cut.set()
    try:
        fd = os.dup(conn.pgconn.socket)
    except (OSError, psycopg.Error):
        return
    with socket.socket(fileno=fd) as sock, contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
