"""A fleet database that takes no writes, or a role that lacks a right: a pause with its reason,
never a crash. Real PostgreSQL (default_transaction_read_only, roles and GRANTs), real daemons.

The invariant (routines/ledger/postgres_open.py `_translate`): every error PostgreSQL gives a
connection attempt or a statement becomes a LedgerError, and a read-only database (SQLSTATE
25006), a missing right (42501) and a full disk (53100) are LedgerUnavailable: the daemon
pauses, says why in `status`, records nothing `failed`, and resumes by itself once it passes.
"""

from __future__ import annotations

import re
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from routines.ledger import LedgerUnavailable, Unavailable
from routines.ledger.postgres import PgLedger
from tests.fleet.fleetkit import Machine, fleet_rows, minute_boundary, minutely, wait_logged
from tests.fleet.pgcluster import Cluster
from tests.fleet.test_fleet_daemons import place
from tests.supervisor.daemonkit import sid

MINUTE = timedelta(minutes=1)


MACHINES: list[Machine] = []  # this test's, whose logs a failed wait shows


def wait_for(predicate: Any, what: str) -> Any:
    return wait_logged(predicate, what, MACHINES)


def machine(*args: Any, **kwargs: Any) -> Machine:
    MACHINES.clear()
    made = Machine(*args, **kwargs)
    MACHINES.append(made)
    return made


def ticking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dsn: str
) -> tuple[Machine, Path, datetime]:
    """Machine a with a minutely `tick`, started, its clock 1 s past the slot it returns."""
    clock = tmp_path / "clock"
    start = minute_boundary()
    place(clock, start - timedelta(seconds=30))
    m = machine(tmp_path, monkeypatch, "a", dsn, clock_file=clock)
    m.write("tick", minutely())
    m.start()
    place(clock, start + timedelta(seconds=1))
    return m, clock, start


def dbname(dsn: str) -> str:
    found = re.search(r"dbname=(\S+)", dsn)
    assert found is not None, dsn
    return found.group(1)


def as_role(dsn: str, role: str) -> str:
    return re.sub(r"user=\S+", f"user={role}", dsn)


def admin(cluster: Cluster, sql: str, db: str = "postgres") -> None:
    """One statement as the cluster's owner, on `db` (the maintenance database by default: a
    database made read-only refuses even the statement that would undo it)."""
    with psycopg.connect(cluster.dsn(db), autocommit=True) as conn:
        conn.execute(sql.encode())


def read_only(cluster: Cluster, db: str, on: bool) -> None:
    """Make `db` read-only for every new session (or writable again), and end the sessions it
    has, as an administrator would: default_transaction_read_only is read at session start."""
    setting = (
        "SET default_transaction_read_only = on" if on else "RESET default_transaction_read_only"
    )
    admin(cluster, f'ALTER DATABASE "{db}" {setting}')
    admin(
        cluster,
        f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{db}' "
        "AND pid <> pg_backend_pid()",
    )


def dml_role(cluster: Cluster, db: str) -> str:
    """A login role with only SELECT, INSERT, UPDATE and DELETE on the tables there are, and
    no right to create any (PostgreSQL 15's default for `public`, made explicit for older
    servers)."""
    role = f"dml_{db}"
    admin(cluster, f'CREATE ROLE "{role}" LOGIN')
    admin(cluster, "REVOKE CREATE ON SCHEMA public FROM PUBLIC", db)
    admin(
        cluster,
        f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "{role}"',
        db,
    )
    admin(cluster, f'GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO "{role}"', db)
    return role


def no_failure(dsn: str) -> None:
    failed = [
        (r.routine, r.slot, r.status, r.detail) for r, _ in fleet_rows(dsn) if r.status == "failed"
    ]
    assert failed == []


def test_a_role_without_the_right_to_create_tables_is_one_error_not_a_thread_pile(
    pg_cluster: Cluster, not_root: None
) -> None:
    """A fresh database and a role that may not create the fleet's tables: the daemon's call
    (a deadline, so connecting happens in a thread) fails once with LedgerUnavailable
    (FORBIDDEN) naming the role and the right, and leaves no connecting thread behind. It
    used to retry itself without end: a thread per attempt, then a RecursionError."""
    db = pg_cluster.create_database()
    role = dml_role(pg_cluster, db)
    before = threading.active_count()
    ledger = PgLedger(as_role(pg_cluster.dsn(db), role), "m", connect=False, deadline=5.0)
    try:
        with pytest.raises(LedgerUnavailable) as caught:
            _ = ledger.data_version
        assert caught.value.reason is Unavailable.FORBIDDEN
        assert role in str(caught.value) and "GRANT CREATE ON SCHEMA public" in str(caught.value)
        assert threading.active_count() <= before + 1  # at most a timer; never a pile
        with pytest.raises(LedgerUnavailable):  # the gate: at once, no new attempt
            _ = ledger.data_version
    finally:
        ledger.close()


def test_a_dml_only_role_runs_the_fleet_once_the_tables_exist(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pg_cluster: Cluster,
    pg_dsn: str,
    not_root: None,
) -> None:
    """The tables made by their owner (`fleet join`), the daemons' role needs only DML: a
    schema already at its version is read, not re-created, at each connection."""
    role = dml_role(pg_cluster, dbname(pg_dsn))
    dsn = as_role(pg_dsn, role)
    m, _, start = ticking(tmp_path, monkeypatch, dsn)
    wait_for(
        lambda: [(r.slot, r.status) for r, _ in fleet_rows(pg_dsn)] == [(sid(start), "ok")],
        what="the slot run under the DML-only role",
    )
    assert m.daemon.stop() == 0


@pytest.mark.slow
def test_a_read_only_fleet_database_pauses_the_daemon_until_it_takes_writes(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pg_cluster: Cluster,
    pg_dsn: str,
    not_root: None,
) -> None:
    m, clock, start = ticking(tmp_path, monkeypatch, pg_dsn)
    wait_for(
        lambda: [(r.slot, r.status) for r, _ in fleet_rows(pg_dsn)] == [(sid(start), "ok")],
        what="the first slot, the database writable",
    )
    db = dbname(pg_dsn)
    s1 = start + MINUTE
    read_only(pg_cluster, db, True)
    try:
        place(clock, s1 + timedelta(seconds=1))
        wait_for(lambda: m.daemon.request("status")["health"] == "read-only", what="the pause")
        status = m.daemon.request("status")
        assert "paused: the ledger is read-only" in status["status"]
        assert "takes no writes" in status["disk_full"]
        out = m.daemon.cli("status")
        assert out.returncode == 0, out.stderr
        assert "takes no writes" in out.stdout or "read-only" in out.stdout
        # The observer's session was ended too: it reconnects within a few polls.
        rows = wait_for(lambda: fleet_rows(pg_dsn), what="the observer to reconnect")
        assert sid(s1) not in {r.slot for r, _ in rows}
        assert m.daemon.proc is not None and m.daemon.proc.poll() is None
    finally:
        read_only(pg_cluster, db, False)
    wait_for(
        lambda: (sid(s1), "ok") in {(r.slot, r.status) for r, _ in fleet_rows(pg_dsn)},
        what="the slot due meanwhile, run once the database takes writes",
    )
    no_failure(pg_dsn)
    log = m.daemon.log()
    assert "Traceback" not in log
    said = [line for line in log.splitlines() if line.startswith("ERROR")]
    assert len([line for line in said if "the database takes no writes" in line]) == 1, log
    # One pause and one resume, not one per write that failed. Turning read-only on and off
    # ends the sessions, so the pause may pass through "connection lost" and its resume line
    # be the outage's ("is back") rather than read-only's ("usable again").
    assert log.count("scheduling resumed") == 1, log
    assert m.daemon.stop() == 0


@pytest.mark.slow
def test_a_role_that_may_not_create_the_tables_pauses_the_daemon_until_granted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_cluster: Cluster, not_root: None
) -> None:
    """A fresh database, its tables not made yet, and a role without CREATE on the schema:
    the daemon stays up and says which right its role lacks; the CLI says it in one line;
    a GRANT and it resumes by itself."""
    db = pg_cluster.create_database()
    role = dml_role(pg_cluster, db)
    owner_dsn = pg_cluster.dsn(db)
    m, clock, start = ticking(tmp_path, monkeypatch, as_role(owner_dsn, role))
    wait_for(lambda: m.daemon.request("status")["health"] == "permission denied", what="the pause")
    status = m.daemon.request("status")
    assert role in status["disk_full"] and "GRANT CREATE ON SCHEMA public" in status["disk_full"]
    assert "paused: the fleet database refuses" in status["status"]
    out = m.daemon.cli("fleet", "status")
    assert out.returncode == 1
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert role in out.stderr
    assert m.daemon.proc is not None and m.daemon.proc.poll() is None
    assert "unreachable" not in m.daemon.log()  # the gate's refusals keep the reason
    admin(pg_cluster, f'GRANT CREATE ON SCHEMA public TO "{role}"', db)
    wait_for(lambda: m.daemon.request("status")["health"] == "ok", what="the daemon to resume")
    s1 = start + MINUTE
    place(clock, s1 + timedelta(seconds=1))
    # Read as the role: an observer connecting as the owner now would make the tables itself,
    # ones the role has no rights on.
    dsn = as_role(owner_dsn, role)
    wait_for(
        lambda: (sid(s1), "ok") in {(r.slot, r.status) for r, _ in fleet_rows(dsn)},
        what="the slot, run once the role may create the tables",
    )
    no_failure(dsn)
    assert "Traceback" not in m.daemon.log()
    assert m.daemon.stop() == 0
