"""A fleet machine cut off from PostgreSQL (supervisor/fleet/offline.py): what still runs on this
machine, and how those runs reach the fleet once the database is back. Real daemons, a real
cluster stopped and started, stepped clocks."""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from routines.ledger import Ledger
from routines.ledger.postgres import PgLedger
from routines.runs import ACTIVE
from tests.fleet.fleetkit import Machine, fleet_rows, minute_boundary, minutely, wait_logged
from tests.fleet.pgcluster import Cluster
from tests.fleet.test_fleet_daemons import pinned, place
from tests.supervisor.daemonkit import sid

MINUTE = timedelta(minutes=1)


MACHINES: list[Machine] = []  # this test's, whose logs a failed wait shows


def wait_for(predicate: Any, what: str) -> Any:
    """A generous deadline: these tests stop and start a cluster, on a loaded machine."""
    return wait_logged(predicate, what, MACHINES)


def local_runs(m: Machine) -> set[tuple[str, str | None, str | None]]:
    """(routine, slot, status) of the runs in the machine's own SQLite ledger."""
    ledger = Ledger(m.paths.ledger)
    try:
        return {(r.routine, r.slot, r.status) for r in ledger.history(None, 1000)}
    finally:
        ledger.close()


@pytest.mark.slow
def test_offline_runs_what_may_run_here_then_syncs_it_in_once(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pg_cluster: Cluster,
    pg_dsn: str,
    not_root: None,
) -> None:
    """Machine a has `local_when_unreachable = true`; b has not, and runs `mine`, pinned to b.
    During the outage a runs `common` from its own ledger, b does not (fail closed), and b runs
    `mine` (it can run nowhere else). Back, each run is in the fleet's history once, the shared
    cursors moved on, and no machine runs a slot twice."""
    clock = tmp_path / "clock"
    start = minute_boundary()
    place(clock, start - timedelta(seconds=30))
    a = Machine(
        tmp_path,
        monkeypatch,
        "a",
        pg_dsn,
        clock_file=clock,
        config="local_when_unreachable = true\n",
    )
    b = Machine(tmp_path, monkeypatch, "b", pg_dsn, clock_file=clock)
    MACHINES[:] = [a, b]
    for m in (a, b):
        m.write("common", minutely())
    b.write("mine", pinned(minutely(), "b"))
    a.start()
    b.start()
    place(clock, start + timedelta(seconds=1))
    wait_for(
        lambda: (
            {(r.routine, r.slot) for r, _ in fleet_rows(pg_dsn) if r.status == "ok"}
            == {("common", sid(start)), ("mine", sid(start))}
        ),
        what="the first slot, with the database up",
    )
    # Both daemons have seen that slot end (nothing runs elsewhere): a slot due while a run
    # elsewhere still looks alive is skipped offline, by design, until its lease lapses.
    for m in (a, b):
        wait_for(lambda m=m: not m.daemon.request("status")["fleet"]["elsewhere"], what="idle")
    pg_cluster.stop()
    s1 = start + MINUTE
    try:
        wait_for(lambda: "running common on this machine" in a.daemon.log(), what="a offline")
        wait_for(lambda: "running mine on this machine" in b.daemon.log(), what="b offline")
        place(clock, s1 + timedelta(seconds=1))
        wait_for(lambda: ("common", sid(s1), "ok") in local_runs(a), what="a's offline run")
        wait_for(lambda: ("mine", sid(s1), "ok") in local_runs(b), what="b's offline run")
        # b tracks only `mine` offline: `common` is a plain fleet routine there.
        assert not {r for r in local_runs(b) if r[0] == "common"}
        assert {r for r in local_runs(a) if r[1] == sid(s1)} == {("common", sid(s1), "ok")}
    finally:
        pg_cluster.restart()
    for m in (a, b):
        wait_for(
            lambda m=m: "copied into the fleet's history" in m.daemon.log(), what=f"{m.name} synced"
        )
    wait_for(
        lambda: (
            {(r.routine, r.slot, r.status, m) for r, m in fleet_rows(pg_dsn)}
            >= {("common", sid(s1), "ok", "a"), ("mine", sid(s1), "ok", "b")}
        ),
        what="the offline runs in the fleet's history",
    )
    observer = PgLedger(pg_dsn, "observer")
    try:
        for name in ("common", "mine"):
            cursor = observer.state(name).cursor
            assert cursor is not None and cursor >= sid(s1), (name, cursor)  # moved forward
    finally:
        observer.close()
    s2 = start + 2 * MINUTE
    place(clock, s2 + timedelta(seconds=1))
    wait_for(
        lambda: (
            {(r.routine, r.slot) for r, _ in fleet_rows(pg_dsn) if r.status == "ok"}
            >= {("common", sid(s2)), ("mine", sid(s2))}
        ),
        what="the fleet's schedule to resume",
    )
    for m in (a, b):
        assert m.daemon.stop() == 0
    rows = fleet_rows(pg_dsn)
    assert not [r for r, _ in rows if r.status in ACTIVE]
    slots = {sid(start + i * MINUTE) for i in range(3)}
    assert Counter((r.routine, r.slot, m) for r, m in rows).most_common(1)[0][1] == 1  # per machine
    assert {(r.routine, r.slot) for r, _ in rows} == {
        (name, slot) for name in ("common", "mine") for slot in slots
    }
    # Twice fleet-wide only where the switch accepts it: b, back first, may claim the slot a
    # ran offline before a's run is copied in.
    twice = {k for k, n in Counter((r.routine, r.slot) for r, _ in rows).items() if n > 1}
    assert twice <= {("common", sid(s1))}
    assert {m for r, m in rows if (r.routine, r.slot) in twice} <= {"a", "b"}
    for m, name in ((a, "common"), (b, "mine")):
        log = m.daemon.log()
        for said in (f"running {name} on this machine", "copied into the fleet's history"):
            lines = [line.split(":", 1)[0] for line in log.splitlines() if said in line]
            assert lines == ["WARNING vinos.fleet", "INFO vinos.notify"], log  # once each
    assert not (a.paths.state_dir / "fleet-offline").exists()


@pytest.mark.slow
def test_a_daemon_started_offline_runs_its_pinned_routine_and_a_later_start_copies_it_in(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pg_cluster: Cluster,
    pg_dsn: str,
    not_root: None,
) -> None:
    """Without the switch: a daemon started while the database is away runs only `mine`
    (pinned to it alone), not `other` (any machine), even as the fleet's only machine. Stopped
    before the database returns, it copies that run in at its next start, before scheduling."""
    clock = tmp_path / "clock"
    start = minute_boundary()
    place(clock, start - timedelta(seconds=30))
    a = Machine(tmp_path, monkeypatch, "a", pg_dsn, clock_file=clock)
    a.write("mine", pinned(minutely(), "a"))
    a.write("other", minutely())
    a.start()
    place(clock, start + timedelta(seconds=1))
    wait_for(
        lambda: (
            {(r.routine, r.slot) for r, _ in fleet_rows(pg_dsn) if r.status == "ok"}
            == {("mine", sid(start)), ("other", sid(start))}
        ),
        what="the first slot, with the database up",
    )
    assert a.daemon.stop() == 0
    s1 = start + MINUTE
    pg_cluster.stop()
    try:
        place(clock, s1 + timedelta(seconds=1))
        a.start()
        wait_for(lambda: ("mine", sid(s1), "ok") in local_runs(a), what="the offline run")
        assert a.daemon.stop() == 0
        assert not {r for r in local_runs(a) if r[0] == "other" and r[1] == sid(s1)}
        assert (a.paths.state_dir / "fleet-offline").exists()  # owed to the fleet
    finally:
        pg_cluster.restart()
    a.start()
    wait_for(
        lambda: ("other", sid(s1)) in {(r.routine, r.slot) for r, _ in fleet_rows(pg_dsn)},
        what="the fleet's schedule to resume",
    )
    assert a.daemon.stop() == 0
    rows = fleet_rows(pg_dsn)
    assert Counter((r.routine, r.slot, m) for r, m in rows) == {
        (name, sid(slot), "a"): 1 for name in ("mine", "other") for slot in (start, s1)
    }
    assert not (a.paths.state_dir / "fleet-offline").exists()
    log = a.daemon.log()
    assert log.count("copied into the fleet's history") == 2  # the log line and the notice


@pytest.mark.slow
def test_the_fleet_waits_for_a_run_made_offline_to_end_before_copying_it_in(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pg_cluster: Cluster,
    pg_dsn: str,
    not_root: None,
) -> None:
    """Back while the offline run is still going: nothing is copied (the row is not final) and
    the fleet's schedule waits; once the run ends it is copied in once, final."""
    gates = tmp_path / "gates"
    gates.mkdir()
    clock = tmp_path / "clock"
    start = minute_boundary()
    place(clock, start - timedelta(seconds=30))
    a = Machine(tmp_path, monkeypatch, "a", pg_dsn, clock_file=clock, worker=("gated", str(gates)))
    a.write("held-mine", pinned(minutely(), "a"))
    a.start()
    pg_cluster.stop()
    try:
        wait_for(lambda: "running held-mine on this machine" in a.daemon.log(), what="a offline")
        place(clock, start + timedelta(seconds=1))
        wait_for((gates / "held-mine.entered").exists, what="the offline run to start")
    finally:
        pg_cluster.restart()
    wait_for(lambda: "still going" in a.daemon.log(), what="the daemon to see the database back")
    observer = PgLedger(pg_dsn, "observer")
    try:
        assert observer.fleet_history(None, limit=100) == []  # not copied while it runs
    finally:
        observer.close()
    (gates / "held-mine.go").touch()
    wait_for(lambda: "copied into the fleet's history" in a.daemon.log(), what="the copy")
    wait_for(lambda: fleet_rows(pg_dsn), what="the row")
    [(row, machine)] = fleet_rows(pg_dsn)
    assert (row.routine, row.slot, row.status, machine) == ("held-mine", sid(start), "ok", "a")
    assert a.daemon.stop() == 0
    assert a.daemon.log().count("still going") == 1  # said once


@pytest.mark.slow
def test_three_strikes_offline_stop_the_routine_for_the_outage(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pg_cluster: Cluster,
    pg_dsn: str,
    not_root: None,
) -> None:
    clock = tmp_path / "clock"
    start = minute_boundary()
    place(clock, start - timedelta(seconds=30))
    a = Machine(tmp_path, monkeypatch, "a", pg_dsn, clock_file=clock, worker=("exit3",))
    a.write("mine", pinned(minutely(), "a"))
    pg_cluster.stop()
    try:
        a.start()
        wait_for(lambda: "running mine on this machine" in a.daemon.log(), what="a offline")
        for i in range(3):
            place(clock, start + i * MINUTE + timedelta(seconds=1))
            wait_for(
                lambda i=i: ("mine", sid(start + i * MINUTE), "failed") in local_runs(a),
                what=f"failed run {i + 1}",
            )
        wait_for(lambda: "not run offline any more" in a.daemon.log(), what="the third strike")
        place(clock, start + 3 * MINUTE + timedelta(seconds=1))
        time.sleep(1.5)  # ticks every 0.2 s: a fourth run would have been claimed by now
        a.daemon.request("ping")
        assert len(local_runs(a)) == 3
        assert a.daemon.stop() == 0
    finally:
        pg_cluster.restart()
