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

from routines.ledger import migrations
from routines.ledger.migrate_postgres import MIGRATION_LOCK, PG_LEDGER_VERSION, STEPS
from routines.ledger.model import LedgerError, LedgerUnavailable, Unavailable
from routines.safetext import redact_url

__all__ = [
    "CALL_DEADLINE_SEC",
    "FIRST_CONNECTION_SEC",
    "Cursor",
    "Gate",
    "PgConnection",
    "backoff",
    "unreachable",
]

CONNECT_TIMEOUT_SEC = 3
# The client-side deadline of each call, the daemon's loop's and a CLI command's alike
# (routines/ledger/api.py `open_ledger`): the daemon's control socket answers within a second,
# and a command fails as an outage rather than hang on a server that stopped answering
# (tests/fleet/test_fleet_cli.py). A first connection may migrate the schema, so it is given
# longer (libpq's own connect_timeout still bounds the connecting).
CALL_DEADLINE_SEC = 0.75
FIRST_CONNECTION_SEC = 15.0
STATEMENT_TIMEOUT_MS = 10_000
# TCP keepalives (a remote server; a Unix socket ignores them): a connection whose peer
# vanished is found dead in about 10 s, even while idle.
KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
}


# The system user PostgreSQL's packages run the server as (Debian, Arch, Fedora).
POSTGRES_USER = "postgres"


def loopback_squatter(dsn: str, where: str) -> str | None:
    """Why nothing may be sent to the database `dsn` names: a host of it is this machine, and
    its port is held by another user's program (not ours, root's or `postgres`). libpq sends
    the user name, and the password in clear to a server that asks for it so (libpq 15 has
    no `require_auth`): a second user who binds 127.0.0.1:5432 while PostgreSQL is stopped
    would get it (tests/fleet/test_redteam_fleet_dsn.py). Unix sockets are not asked: their
    folder is the server's. The check runs before each connection attempt; a squatter that
    binds between the check and libpq's connect is caught by the next attempt."""
    from routines.listeners import foreign_holder

    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return None  # libpq says what is wrong with it
    hosts = str(info.get("hostaddr") or info.get("host") or os.environ.get("PGHOSTADDR")
                or os.environ.get("PGHOST") or "").split(",")  # fmt: skip
    ports = str(info.get("port") or os.environ.get("PGPORT") or "5432").split(",")
    for i, host in enumerate(hosts):
        if not host or host.startswith(("/", "@")):
            continue
        port_text = ports[i] if i < len(ports) else ports[-1]
        if not port_text.strip().isdigit():
            continue
        port = int(port_text)
        try:
            uid = foreign_holder(host, port, {POSTGRES_USER})
        except OSError as exc:
            return f"{where}: cannot tell who listens on port {port} of this machine: {exc}"
        if uid is not None:
            return (
                f"{where}: {host} is this machine, and port {port} is held by another user's "
                f"program (uid {uid}), not PostgreSQL's, yours or root's; nothing was sent to "
                "it (libpq would send your password). Start your PostgreSQL, or ask who "
                "listens: ss -ltnp"
            )
    return None


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
        connect_within: float | None = None,
    ) -> None:
        self.dsn = dsn
        self.gate = gate or Gate()
        self.deadline = deadline  # client-side, seconds: see the module's docstring
        # How long a connection attempt may take, with a deadline (default: the deadline).
        self.connect_within = connect_within
        self.where = redact_url(dsn) if "://" in dsn else "the fleet database"
        self._conn: psycopg.Connection[dict[str, Any]] | None = None
        self._lock = threading.Lock()
        self._connecting: threading.Thread | None = None
        self._connected: psycopg.Connection[dict[str, Any]] | None = None
        self._connect_error: LedgerError | None = None
        self._last: LedgerUnavailable | None = None  # what shut the gate
        if connect:
            self._connection()

    # -- connection ---------------------------------------------------------------------

    def _connection(self) -> psycopg.Connection[dict[str, Any]]:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        if self.deadline is not None:
            return self._connection_within(self.connect_within or self.deadline)
        if not self.gate.open():
            raise self._shut_out()
        try:
            conn = self._open()
        except LedgerUnavailable as exc:
            raise self._failed(exc) from exc.__cause__
        self.gate.succeeded()
        self._conn = conn
        return conn

    def _open(self) -> psycopg.Connection[dict[str, Any]]:
        """A new, migrated connection; LedgerUnavailable (UNREACHABLE, READ_ONLY, FORBIDDEN,
        DISK_FULL), or LedgerError (a newer schema, or an error of ours)."""
        if problem := loopback_squatter(self.dsn, self.where):
            raise unreachable(problem)
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
        except psycopg.Error as exc:
            role = conn.info.user
            conn.close()
            raise self._translate(exc, role, migrating=True) from exc
        except BaseException:
            conn.close()
            raise
        return conn

    def _translate(self, exc: psycopg.Error, role: str, *, migrating: bool = False) -> LedgerError:
        """The one place a psycopg error becomes ours. Each reason is a pause the daemon
        retries (tests/fleet/test_fleet_rights.py): a database that takes no writes
        (SQLSTATE 25006: default_transaction_read_only, a hot standby), a role without a right
        it needs (42501), no space (53100), a lost connection. Anything else is a LedgerError."""
        first = _first_line(exc)
        if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
            return LedgerUnavailable(
                Unavailable.READ_ONLY,
                f"{self.where}: the database takes no writes ({first}); make it writable "
                "(default_transaction_read_only off, or a primary rather than a standby)",
            )
        if isinstance(exc, psycopg.errors.InsufficientPrivilege):
            return LedgerUnavailable(Unavailable.FORBIDDEN, _forbidden(self.where, role, first))
        if isinstance(exc, psycopg.errors.DiskFull):
            return LedgerUnavailable(
                Unavailable.DISK_FULL,
                f"{self.where}: the database server has no space left ({first}); "
                "free some on its disk",
            )
        if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
            return unreachable(f"{self.where}: connection lost ({first})")
        doing = "preparing its tables" if migrating else "a statement"
        return LedgerError(f"{self.where}: {doing} failed ({first})")

    def _connection_within(self, deadline: float) -> psycopg.Connection[dict[str, Any]]:
        """Connect in a thread, waiting at most `deadline` (the connection a timed-out
        attempt makes later is the next call's); fail at once while one is under way.
        One attempt per call, never a loop: an attempt ends with a connection or an error
        (tests/fleet/test_fleet_rights.py, where every attempt fails)."""
        taken = self._take_connected()
        if taken is not None:
            return taken
        late = self._take_error()  # of an attempt that ran past its deadline
        if late is not None:
            raise late
        if self._connecting is not None and self._connecting.is_alive():
            raise unreachable(
                f"{self.where}: not answering (still connecting after {deadline:g} s)"
            )
        if not self.gate.open():
            raise self._shut_out()
        self._connecting = threading.Thread(target=self._attempt, name="pg-connect", daemon=True)
        self._connecting.start()
        self._connecting.join(deadline)
        if self._connecting.is_alive():
            raise self._failed(
                unreachable(f"{self.where}: not answering (no connection within {deadline:g} s)")
            )
        self._connecting = None
        taken = self._take_connected()
        if taken is not None:
            return taken
        failed = self._take_error() or LedgerError(f"{self.where}: the connection attempt failed")
        if isinstance(failed, LedgerUnavailable):
            raise self._failed(failed) from failed.__cause__
        raise failed

    def _attempt(self) -> None:
        """The connecting thread's body: it ends with `_connected` or `_connect_error` set,
        whatever happens (an error escaping here would leave neither)."""
        try:
            self._connected = self._open()
        except LedgerError as exc:
            self._connect_error = exc
        except Exception as exc:  # a bug of ours: said, never lost with the thread
            self._connect_error = LedgerError(f"{self.where}: cannot connect ({exc!r})")

    def _take_connected(self) -> psycopg.Connection[dict[str, Any]] | None:
        conn, self._connected = self._connected, None
        if conn is not None:
            self.gate.succeeded()
            self._conn = conn
        return conn

    def _take_error(self) -> LedgerError | None:
        error, self._connect_error = self._connect_error, None
        return error

    def _failed(self, exc: LedgerUnavailable) -> LedgerUnavailable:
        """Shut the gate for `exc`: the calls until the next attempt fail at once with it."""
        self.gate.failed()
        self._last = exc
        return exc

    def _shut_out(self) -> LedgerUnavailable:
        """A call while the gate is shut: the reason of the failure that shut it, so a
        read-only database or a missing right stays that in `status`, not "unreachable"
        (tests/fleet/test_fleet_rights.py)."""
        last = self._last
        if last is None or last.reason is Unavailable.UNREACHABLE:
            return unreachable(f"{self.where}: unreachable (retrying with back-off)")
        return LedgerUnavailable(last.reason, str(last))

    def _drop(self, conn: psycopg.Connection[dict[str, Any]]) -> None:
        conn.close()
        if self._conn is conn:
            self._conn = None

    def _broken(self, exc: psycopg.Error, why: str = "") -> LedgerUnavailable:
        if self._conn is not None:
            self._conn.close()
        self._conn = None
        why = why or f"connection lost ({_first_line(exc)})"
        raise self._failed(unreachable(f"{self.where}: {why}")) from exc

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
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                if isinstance(exc, psycopg.errors.DiskFull):
                    raise self._translate(exc, conn.info.user) from exc
                if cut.is_set():
                    self._broken(exc, f"not answering (no answer within {self.deadline:g} s)")
                if conn.closed or conn.broken or isinstance(exc, psycopg.InterfaceError):
                    self._broken(exc)
                raise LedgerError(f"{self.where}: {_first_line(exc)}") from exc
            except (
                psycopg.errors.ReadOnlySqlTransaction,
                psycopg.errors.InsufficientPrivilege,
            ) as exc:
                # A pause, retried on a new session: default_transaction_read_only is read
                # when a session starts, so the one that met it stays read-only for ever.
                role = conn.info.user
                self._drop(conn)
                error = self._translate(exc, role)
                if isinstance(error, LedgerUnavailable):
                    raise self._failed(error) from exc
                raise error from exc
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
        """Apply the schema's pending named steps (migrate_postgres.py), each recorded in
        ledger_migrations. A schema already current is only read, so a role with no right to
        create tables (PostgreSQL 15 grants none on `public`) or a read-only database still
        connects; the writes then fail where they happen, as a pause
        (tests/fleet/test_fleet_rights.py)."""
        with conn.transaction(), conn.cursor() as cur:
            version, done = self._applied(cur)
            if version == PG_LEDGER_VERSION and not migrations.pending(STEPS, done, self.where):
                return
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            cur.execute("CREATE TABLE IF NOT EXISTS ledger_meta (key TEXT PRIMARY KEY, value TEXT)")
            cur.execute(migrations.TABLE)
            _, done = self._applied(cur)  # again, under the lock: another may have migrated
            stamp = "to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
            record = f"INSERT INTO ledger_migrations VALUES (%s, {stamp}) ON CONFLICT DO NOTHING"
            for name in sorted(done):  # a numbered database's steps, recorded by name once
                cur.execute(record, (name,))
            for step in migrations.pending(STEPS, done, self.where):
                step.apply(cur)
                cur.execute(record, (step.name,))
            cur.execute(
                "INSERT INTO ledger_meta (key, value) VALUES ('version', %s) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(PG_LEDGER_VERSION),),
            )

    def _applied(self, cur: Cursor) -> tuple[int, frozenset[str]]:
        """The schema's number (0: no tables yet) and the steps it has applied: by name, or by
        its number from before named steps. LedgerError for a newer one than ours."""
        cur.execute(
            "SELECT to_regclass('ledger_meta') IS NOT NULL AS meta, "
            "to_regclass('ledger_migrations') IS NOT NULL AS named"
        )
        row = cur.fetchone()
        if row is None or not row["meta"]:
            return 0, frozenset()
        named = bool(row["named"])
        cur.execute("SELECT value FROM ledger_meta WHERE key = 'version'")
        row = cur.fetchone()
        version = int(row["value"]) if row else 0
        if version > PG_LEDGER_VERSION:
            raise migrations.newer_error(self.where, f"schema {version}")
        if version < PG_LEDGER_VERSION or not named:
            return version, migrations.applied_before(STEPS, version)
        cur.execute("SELECT name FROM ledger_migrations")
        return version, frozenset(r["name"] for r in cur.fetchall())


def _forbidden(where: str, role: str, detail: str) -> str:
    """What to tell the user when the fleet database refuses `role` a right: which right,
    and the GRANT that gives it."""
    if "schema" in detail:  # creating or upgrading the tables
        return (
            f"{where}: the role {role!r} may not create the fleet's tables ({detail}); "
            f'grant it CREATE on the schema (GRANT CREATE ON SCHEMA public TO "{role}"), '
            "or run `vinos-routine fleet join` once as the role that owns them"
        )
    return (
        f"{where}: the role {role!r} lacks a right on the fleet's tables ({detail}); grant it "
        f"SELECT, INSERT, UPDATE and DELETE (GRANT SELECT, INSERT, UPDATE, DELETE ON ALL "
        f'TABLES IN SCHEMA public TO "{role}")'
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
