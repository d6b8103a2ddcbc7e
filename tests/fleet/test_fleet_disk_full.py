"""PostgreSQL out of disk space, and an outage during the budget check, under a real daemon.

Disk full: a PL/pgSQL trigger raises SQLSTATE 53100 (disk_full, what PostgreSQL says when it
cannot extend a file) on writes of `runs`, as the server's full disk would, without filling a
disk.

The invariant: a run that did not execute because of it is never `failed` and never a strike,
a run that did execute keeps its real result (in memory until the database takes writes), and
no worker is left behind (routines/ledger/postgres_open.py `_translate`, supervisor/engine/pool.py
`_run`)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest

from routines.ledger import LedgerUnavailable, Unavailable
from routines.ledger.postgres import PgLedger
from tests.fleet.fleetkit import Machine, fleet_rows, minute_boundary, minutely, wait_logged
from tests.fleet.pgcluster import Cluster
from tests.fleet.test_fleet_daemons import place
from tests.fleet.test_fleet_rights import as_role, dbname, dml_role
from tests.supervisor.daemonkit import sid

MINUTE = timedelta(minutes=1)
MACHINES: list[Machine] = []


def wait_for(predicate: Any, what: str) -> Any:
    return wait_logged(predicate, what, MACHINES)


FULL = """
CREATE OR REPLACE FUNCTION disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'could not extend file "base/1/2": No space left on device'
    USING ERRCODE = 'disk_full';
END $$
"""


def fill(dsn: str, table: str, events: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(FULL)
        conn.execute(
            f"CREATE TRIGGER full_disk BEFORE {events} ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION disk_full()"
        )


def free(dsn: str, table: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TRIGGER full_disk ON {table}")


def workers(m: Machine) -> list[psutil.Process]:
    """The worker processes under the daemon (the stand-in worker), at any depth."""
    try:
        children = psutil.Process(m.daemon.pid).children(recursive=True)
    except psutil.Error:
        return []
    out = []
    for child in children:
        try:
            if any("fakeworker" in part for part in child.cmdline()):
                out.append(child)
        except psutil.Error:
            continue
    return out


def test_postgresql_disk_full_is_a_disk_full_pause_not_an_error(
    pg_dsn: str, not_root: None
) -> None:
    """The mapping itself, on a real server: SQLSTATE 53100 is LedgerUnavailable (DISK_FULL)
    with the server's words, not a LedgerError that would fail a run."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE scratch (x int)")
    fill(pg_dsn, "scratch", "INSERT")
    ledger = PgLedger(pg_dsn, "m", deadline=5.0)
    try:
        with pytest.raises(LedgerUnavailable) as caught, ledger.transaction() as cur:
            cur.execute("INSERT INTO scratch VALUES (1)")
        assert caught.value.reason is Unavailable.DISK_FULL
        assert "No space left on device" in str(caught.value)
        assert ledger.ping()  # the connection is still good: only the write failed
    finally:
        ledger.close()


@pytest.mark.slow
def test_a_full_fleet_database_fails_no_run_and_leaks_no_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_dsn: str, not_root: None
) -> None:
    """First the rows cannot be updated: the claimed run executes, its start and its end are
    not written; the daemon pauses (disk full), keeps the result, leaves no worker, and writes
    `ok` once there is room. Then no row can be written at all: the claim fails, nothing runs,
    nothing is recorded; the slot runs once there is room. Never `failed`, never a strike."""
    clock = tmp_path / "clock"
    start = minute_boundary()
    place(clock, start - timedelta(seconds=30))
    m = Machine(tmp_path, monkeypatch, "a", pg_dsn, clock_file=clock)
    MACHINES[:] = [m]
    m.write("tick", minutely())
    m.start()

    fill(pg_dsn, "runs", "UPDATE")
    try:
        place(clock, start + timedelta(seconds=1))
        wait_for(lambda: m.daemon.request("status")["health"] == "disk full", what="the pause")
        wait_for(lambda: m.daemon.request("status")["unwritten"], what="the result kept")
        wait_for(lambda: not workers(m), what="the worker to end")
        assert "No space left on device" in m.daemon.request("status")["disk_full"]
    finally:
        free(pg_dsn, "runs")
    wait_for(
        lambda: [(r.slot, r.status) for r, _ in fleet_rows(pg_dsn)] == [(sid(start), "ok")],
        what="the kept result written",
    )

    s1 = start + MINUTE
    fill(pg_dsn, "runs", "INSERT OR UPDATE")
    try:
        place(clock, s1 + timedelta(seconds=1))
        wait_for(lambda: m.daemon.request("status")["health"] == "disk full", what="the pause")
        assert sid(s1) not in {r.slot for r, _ in fleet_rows(pg_dsn)}
        assert not workers(m)
    finally:
        free(pg_dsn, "runs")
    wait_for(
        lambda: (sid(s1), "ok") in {(r.slot, r.status) for r, _ in fleet_rows(pg_dsn)},
        what="the slot, run once there is room",
    )
    assert [r.status for r, _ in fleet_rows(pg_dsn)] == ["ok", "ok"]
    observer = PgLedger(pg_dsn, "observer")
    try:
        assert observer.state("tick").failure_streak == 0
    finally:
        observer.close()
    wait_for(lambda: not workers(m), what="no worker left")
    assert "Traceback" not in m.daemon.log()
    assert m.daemon.stop() == 0


# The budget check's query alone, recognised by its text, waits past the daemon's client-side
# deadline: an outage that begins after the claim and before the run, without timing anything.
# Row-level security calls the function for the rows the query reads, as the daemons' role (not
# the superuser, which row-level security never applies to).
HANG_THE_BUDGET_CHECK = """
CREATE OR REPLACE FUNCTION budget_hangs() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  IF current_query() LIKE '%SUM(dollars), 0) AS s FROM runs WHERE routine%' THEN
    PERFORM pg_sleep(5);
  END IF;
  RETURN true;
END $$
"""


@pytest.mark.slow
def test_an_outage_during_the_budget_check_fails_no_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pg_cluster: Cluster,
    pg_dsn: str,
    not_root: None,
) -> None:
    """The claim went through, then the database stops answering the budget check: the run
    never executes, is recorded `skipped` with the reason (not `failed`, no strike), and the
    next slot runs once the database answers again."""
    role = dml_role(pg_cluster, dbname(pg_dsn))
    clock = tmp_path / "clock"
    start = minute_boundary()
    if (start.hour, start.minute) == (23, 58):  # the budget check reads today's runs: one day
        start += 3 * MINUTE
    place(clock, start - timedelta(seconds=30))
    m = Machine(tmp_path, monkeypatch, "a", as_role(pg_dsn, role), clock_file=clock)
    MACHINES[:] = [m]
    m.write("tick", minutely())
    m.start()
    place(clock, start + timedelta(seconds=1))
    wait_for(
        lambda: [(r.slot, r.status) for r, _ in fleet_rows(pg_dsn)] == [(sid(start), "ok")],
        what="the first slot, the database answering",
    )
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(HANG_THE_BUDGET_CHECK)
        conn.execute("ALTER TABLE runs ENABLE ROW LEVEL SECURITY")
        conn.execute("CREATE POLICY budget ON runs USING (budget_hangs()) WITH CHECK (true)")
    s1 = start + MINUTE
    place(clock, s1 + timedelta(seconds=1))
    row = wait_for(
        lambda: next(
            (r for r, _ in fleet_rows(pg_dsn) if r.slot == sid(s1) and r.finished_at), None
        ),
        what="the slot whose budget check found no answer",
    )
    assert row.status == "skipped", row
    assert "not run: the ledger is unavailable (unreachable)" in (row.detail or "")
    assert not workers(m)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP POLICY budget ON runs")
        conn.execute("ALTER TABLE runs DISABLE ROW LEVEL SECURITY")
    s2 = s1 + MINUTE
    place(clock, s2 + timedelta(seconds=1))
    wait_for(
        lambda: (sid(s2), "ok") in {(r.slot, r.status) for r, _ in fleet_rows(pg_dsn)},
        what="the next slot, the database answering again",
    )
    assert "failed" not in {r.status for r, _ in fleet_rows(pg_dsn)}
    observer = PgLedger(pg_dsn, "observer")
    try:
        assert observer.state("tick").failure_streak == 0
    finally:
        observer.close()
    assert m.daemon.stop() == 0
